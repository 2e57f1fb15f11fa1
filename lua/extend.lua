-- Lengthens the lock's time to live to ttl if this node still holds our
-- token. A key is never shortened: a call that lands late (one of an Extend
-- that failed, or that arrives after a later Extend) must not end the key
-- before the validity its holder still reports.
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- Returns 1 if the key holds our token, 0 if it is gone, holds another
-- token or is held by a lock of another kind.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  lengthen(KEYS[1], tonumber(ARGV[2]))
  return 1
end
return 0
