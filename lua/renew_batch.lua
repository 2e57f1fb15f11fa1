-- Renews many plain locks at once: for each key that still holds its
-- token, lengthens its time to live to the ttl given with it, and takes
-- each key that is free for its token, as extend.lua does for one (a key
-- is never shortened; another token is left alone).
-- KEYS: the lock keys
-- ARGV: for KEYS[i], ARGV[2i-1] its token and ARGV[2i] its ttl in
-- milliseconds
-- Returns, for each key in order, 1 if it held its token, 2 if it was free
-- and now holds it, 0 if not.
local held = {}
for i, key in ipairs(KEYS) do
  local ttl = tonumber(ARGV[2 * i])
  local v = redis.pcall('GET', key)
  if v == ARGV[2 * i - 1] then
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
    held[i] = 1
  elseif v == false then
    redis.call('SET', key, ARGV[2 * i - 1], 'PX', ttl)
    held[i] = 2
  else
    held[i] = 0
  end
end
return held
