-- Takes the lock on this node if it is free, or renews it if it already
-- holds our token (a command that go-redis sent again after a network error
-- must not report a lock we hold as taken by someone else).
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- ARGV[2]: ttl in milliseconds
-- Returns 1 if the key now holds our token; if someone else holds it, a
-- negative number naming the holder (from its token's first 8 bytes), so
-- that the client can tell one holder on many nodes from a split vote.
local function holder(t)
  local n = 0
  for i = 1, math.min(8, #t) do
    n = n * 64 + string.byte(t, i) % 64
  end
  return -(n + 1)
end
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return holder(v)
