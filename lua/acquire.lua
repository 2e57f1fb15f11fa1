-- Used for a fenced plain lock; a plain lock that is not fenced takes a
-- free key with one SET key token NX PX ttl GET (internal/nodeio, SetNX),
-- decoded as this script's reply, and runs this script only where that
-- SET found our own token (this script lengthens its ttl) or where the
-- node refuses the command (a Redis before 7.0).
-- Takes the lock on this node if it is free, or keeps it if it already
-- holds our token (a command that go-redis sent again after a network error
-- must not report a lock we hold as taken by someone else; its time to live
-- is lengthened to ttl, never shortened). For a fenced lock it then
-- draws the next value of the key's fencing counter (prelude.lua).
-- KEYS[1]: the lock key
-- KEYS[2]: the key's fencing counter, given only for a fenced lock
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- ARGV[3]: for a fenced lock, how long (ms) the counter is kept once the
--          node's clock has passed it (prelude.lua)
-- Returns {held, counter, holder, other kind} (a Grant, internal/nodeio):
-- {1, c} when the key now holds our token, c the fencing counter's new
-- value (1 when not fenced); {0, 0, n} when someone else holds it, n > 0
-- naming the holder (from its token's first 8 bytes), so that the client
-- can tell one holder on many nodes from a split vote; {0, 0, 0, 1} when a
-- lock of another kind holds it (the key is not a string: GET fails).
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {0, 0, 0, 1}
elseif v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif v == ARGV[1] then
  lengthen(KEYS[1], tonumber(ARGV[2]))
else
  local n = 0
  for i = 1, math.min(8, #v) do
    n = n * 64 + string.byte(v, i) % 64
  end
  return {0, 0, n + 1}
end
if #KEYS > 1 then
  return {1, counter_next(KEYS[2], ARGV[3])}
end
return {1, 1}
