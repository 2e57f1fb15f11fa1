-- A waiter's place in a plain lock's line on this node: a release wakes the
-- first two in line that still listen (see release.lua), not every waiter.
-- The line is a sorted set of waiter names by arrival (the node's time);
-- it expires when no waiter has joined it for ARGV[3] milliseconds. A join
-- or a leave also takes the waiter off the line's woken waiters: it tried
-- again after its wake-up, or is done.
-- KEYS[1]: the line
-- KEYS[2]: the line's woken waiters (a hash of names; see release.lua)
-- ARGV[1]: 'join' (keeps an earlier place) or 'leave'
-- ARGV[2]: the waiter's name
-- ARGV[3]: for join, how long the line lasts, in milliseconds
-- Returns 1, or 0 when the key is not a line (it is left alone).
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'zset' and kind ~= 'none' then
  return 0
end
if ARGV[1] == 'join' then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[1], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[2])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
else
  redis.call('ZREM', KEYS[1], ARGV[2])
end
redis.call('HDEL', KEYS[2], ARGV[2])
return 1
