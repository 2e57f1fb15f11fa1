-- Deletes the lock if this node still holds our token; another holder's key
-- is left as it is. When ARGV[2] is given, announces the release: to the
-- first two waiters in the key's line on this node (KEYS[2], see line.lua)
-- that still listen, each on its own channel (ARGV[2] .. ':' .. its name),
-- so that two waiters try rather than all (two: should the first have just
-- given up or hung, the second goes on); when the line has none, on
-- ARGV[2] itself, to every waiter subscribed to it. Waiters found gone
-- (nobody receives their message) leave the line, up to 10 looked at per
-- release. A waiter woken by an earlier release that has not been back in
-- line since (KEYS[3]: it did not try again, so it hangs, or is slow) is
-- passed over: two hung waiters first in line would otherwise take every
-- release's wake-ups, and the waiters behind them would hear none.
-- KEYS[1]: the lock key
-- KEYS[2]: the key's line (optional)
-- KEYS[3]: the line's woken waiters, a hash of names (with KEYS[2])
-- ARGV[1]: our token
-- ARGV[2]: the release channel, or "" to say nothing
-- ARGV[3]: the run's token prefix (of_run, prelude.lua), or none: a token
--          of the run left here is deleted too
-- Returns 1 if our key was deleted, 0 if it was gone, held another token
-- (one of the run's, deleted, included) or is held by a lock of another
-- kind.
local v = redis.pcall('GET', KEYS[1])
local ours = v == ARGV[1]
if not ours and not of_run(v, ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
local n = ours and 1 or 0
if ARGV[2] == '' then
  return n
end
local woken = 0
if #KEYS > 2 and redis.call('TYPE', KEYS[2]).ok == 'zset' then
  local line = redis.call('ZRANGE', KEYS[2], 0, 9)
  for _, name in ipairs(line) do
    if redis.call('HEXISTS', KEYS[3], name) == 1 then
      -- woken before, and not back in line since: passed over
    elseif redis.call('PUBLISH', ARGV[2] .. ':' .. name, '') > 0 then
      redis.call('HSET', KEYS[3], name, 1)
      woken = woken + 1
      if woken == 2 then
        break
      end
    else
      redis.call('ZREM', KEYS[2], name)
    end
  end
  if woken > 0 then
    redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[2]))
  end
end
if woken == 0 then
  redis.call('PUBLISH', ARGV[2], '')
end
return n
