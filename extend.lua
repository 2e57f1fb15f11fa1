-- Sets a new ttl on the lock if this node still holds our token.
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- Returns 1 if the ttl was set, 0 if the key is gone or holds another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
