-- Takes the lock on this node as acquire.lua does and, when the key holds
-- our token, increments the key's fencing counter.
-- KEYS[1]: the lock key
-- KEYS[2]: the fencing counter of the lock key (no TTL: it must outlive locks)
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- Returns the counter after the increment (1 or more) if the key now holds
-- our token; if someone else holds it, a negative number naming the holder,
-- as acquire.lua does.
local function holder(t)
  local n = 0
  for i = 1, math.min(8, #t) do
    n = n * 64 + string.byte(t, i) % 64
  end
  return -(n + 1)
end
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return holder(v)
end
return redis.call('INCR', KEYS[2])
