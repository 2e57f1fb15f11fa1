-- Renews many plain locks at once: for each key that still holds its
-- token, lengthens its time to live to the ttl given with it, as
-- extend.lua does for one (a key is never shortened).
-- KEYS: the lock keys
-- ARGV: for KEYS[i], ARGV[2i-1] its token and ARGV[2i] its ttl in
-- milliseconds
-- Returns, for each key in order, 1 if it holds its token, 0 if not.
local held = {}
for i, key in ipairs(KEYS) do
  local ttl = tonumber(ARGV[2 * i])
  if redis.pcall('GET', key) == ARGV[2 * i - 1] then
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
