-- Hands a lock from its holder in one process to the next goroutine of the
-- same process waiting for it: takes the key if it holds the holder's token,
-- an earlier token of the holder's run of hand-offs, or is free, or keeps it
-- if it already holds ours (a resend; its time to live is lengthened, never
-- shortened).
-- KEYS[1]: the lock key
-- KEYS[2]: the key's fencing counter, given only for a fenced lock
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- ARGV[3]: the holder's token
-- ARGV[4]: the key's release channel
-- ARGV[5]: for a fenced lock, how long (ms) the counter is kept once the
--          node's clock has passed it (prelude.lua); else 0
-- ARGV[6]: the run's token prefix (of_run, prelude.lua): a token of the run
--          left here is taken as the holder's is
-- Returns {held, counter, waiting, found} (a HandOff, internal/nodeio):
-- {0} if someone else holds the key (or a lock of another kind); else
-- {1, c, w, found}: c is the fencing counter's new value (1 when not
-- fenced), w is 1 if another process waits for the key's release here (it
-- subscribed to the channel), found is 1 if the holder's token was there,
-- 0 if not, and 2 if ours was (a resend of this call, whose first run is
-- the one that knew).
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {0}
end
local found = 0
if v == ARGV[3] then
  found = 1
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif v == ARGV[1] then
  found = 2
  lengthen(KEYS[1], tonumber(ARGV[2]))
elseif v == false or of_run(v, ARGV[6]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  return {0}
end
local c = 1
if #KEYS > 1 then
  c = counter_next(KEYS[2], ARGV[5])
end
return handoff_result(c, found, ARGV[4])
