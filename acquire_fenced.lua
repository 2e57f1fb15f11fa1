-- Takes the lock on this node as acquire.lua does and, when the key holds
-- our token, increments the key's fencing counter.
-- KEYS[1]: the lock key
-- KEYS[2]: the fencing counter of the lock key (no TTL: it must outlive locks)
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- Returns the counter after the increment (1 or more) if the key now holds
-- our token, 0 if someone else holds it.
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return 0
end
return redis.call('INCR', KEYS[2])
