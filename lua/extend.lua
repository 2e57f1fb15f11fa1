-- Lengthens the lock's time to live to ttl if this node still holds our
-- token. A key is never shortened: a call that lands late (one of an Extend
-- that failed, or that arrives after a later Extend) must not end the key
-- before the validity its holder still reports. Where the key is free, it
-- is taken for our token, as an acquire takes it (SET NX): the lock, won
-- on a quorum while this node still held another's key, heals here. A key
-- that holds another token, or a lock of another kind, is left alone.
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- Returns 1 if the key held our token, 2 if it was free and now holds it,
-- 0 if it holds another token or is held by a lock of another kind.
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  lengthen(KEYS[1], tonumber(ARGV[2]))
  return 1
elseif v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
