-- Reads a value for a holder with a fencing token, and records the token as
-- the highest seen, unless a higher one was seen already: from then on no
-- write (fenced_set.lua) or read of a lower token is taken. A holder that
-- reads with its token and then writes with it makes a read-modify-write
-- that no older holder's write can come between.
-- KEYS[1]: the key to read
-- KEYS[2]: the highest token seen for KEYS[1] (read or written)
-- ARGV[1]: the reader's fencing token, in decimal without leading zeros
-- Returns {1, value} (value nil when KEYS[1] does not exist) when read,
-- {0, highest} when refused.
-- Tokens are compared as the integers they are (token_below, prelude.lua).
local seen = redis.call('GET', KEYS[2]) or '0'
local token = ARGV[1]
if token_below(token, seen) then
  return {0, seen}
end
if token_below(seen, token) then
  redis.call('SET', KEYS[2], token)
end
return {1, redis.call('GET', KEYS[1])}
