-- Deletes the lock if this node still holds our token; another holder's key
-- is left as it is.
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- Returns 1 if our key was deleted, 0 if it was gone or held another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
