-- Raises a fencing counter to at least the given value; never lowers it.
-- KEYS[1]: the fencing counter
-- ARGV[1]: the value
-- Returns 1.
local n = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < n then
  redis.call('SET', KEYS[1], n)
end
return 1
