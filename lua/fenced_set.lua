-- Writes a value only if its fencing token is not lower than the highest
-- token already applied to the key (written here, or read by
-- fenced_get.lua).
-- KEYS[1]: the key to write
-- KEYS[2]: the highest token applied to KEYS[1]
-- ARGV[1]: the value
-- ARGV[2]: the writer's fencing token, in decimal without leading zeros
-- Returns {1, previous highest} when written, {0, highest} when refused.
-- Tokens are compared as the integers they are (token_below, prelude.lua).
local seen = redis.call('GET', KEYS[2]) or '0'
local token = ARGV[2]
if token_below(token, seen) then
  return {0, seen}
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[1])
return {1, seen}
