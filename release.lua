-- Deletes the lock if this node still holds our token; another holder's key
-- is left as it is. When ARGV[2] is given, announces the release: to the
-- first waiter in the key's line on this node (KEYS[2], see line.lua) that
-- still listens, on its own channel (ARGV[2] .. ':' .. its name), so that
-- one waiter tries rather than all; when the line has none, on ARGV[2]
-- itself, to every waiter subscribed to it. Waiters found gone (nobody
-- receives their message) leave the line, a few per release.
-- KEYS[1]: the lock key
-- KEYS[2]: the key's line (optional)
-- ARGV[1]: our token
-- ARGV[2]: the release channel, or "" to say nothing
-- Returns 1 if our key was deleted, 0 if it was gone, held another token or
-- is held by a lock of another kind.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] == '' then
  return 1
end
if #KEYS > 1 and redis.call('TYPE', KEYS[2]).ok == 'zset' then
  for _ = 1, 8 do
    local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not first then
      break
    end
    if redis.call('PUBLISH', ARGV[2] .. ':' .. first, '') > 0 then
      return 1
    end
    redis.call('ZREM', KEYS[2], first)
  end
end
redis.call('PUBLISH', ARGV[2], '')
return 1
