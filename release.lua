-- Deletes the lock if this node still holds our token; another holder's key
-- is left as it is. When ARGV[2] is given, announces the release on that
-- channel, so that waiters subscribed to it try again at once.
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- ARGV[2]: the release channel, or "" to say nothing
-- Returns 1 if our key was deleted, 0 if it was gone, held another token or
-- is held by a lock of another kind.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], '')
  end
  return 1
end
return 0
