-- A reentrant lock: one owner at a time, which may hold it many times.
-- KEYS[1]: the lock key, a hash: owner -> how many times it holds the lock
-- KEYS[2]: {key}:grants, a set of the tokens of the holds (so that a resent
--          command, or the cleanup of an attempt that may not have landed,
--          never counts twice)
-- KEYS[3]: the key's fencing counter, when ARGV[5] is not 0
-- ARGV[1]: acquire, extend, release or drop
-- ARGV[2]: the hold's token; ARGV[3]: ttl in ms; ARGV[4]: release channel or ''
-- ARGV[5]: to draw the fencing counter on acquire, how long (ms) it is
--          kept once the node's clock has passed it (prelude.lua); else 0
-- ARGV[6]: the owner
-- Acquire returns {held, counter} (granted, prelude.lua): {0} when another
-- owner holds the lock, else {1, the fencing counter (1 when not fenced)}.
-- The others return 1 if the hold was there.
-- A ttl only ever lengthens the keys' time to live: another hold of the
-- same owner may need it. A key held by a lock of another kind (not a hash)
-- counts as held against us: every operation is refused.
local h, g = KEYS[1], KEYS[2]
local op, token, px, owner = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[6]
local kind = redis.call('TYPE', h).ok
if kind ~= 'none' and kind ~= 'hash' then
  return op == 'acquire' and granted(0) or 0 -- a lock of another kind holds the key
end
if op == 'acquire' then
  if redis.call('SISMEMBER', g, token) == 0 then
    if redis.call('EXISTS', h) == 1 and redis.call('HEXISTS', h, owner) == 0 then
      return granted(0)
    end
    redis.call('HINCRBY', h, owner, 1)
    redis.call('SADD', g, token)
  end
  lengthen(h, px)
  lengthen(g, px)
  return granted(counter_or_one(KEYS[3], ARGV[5]))
elseif op == 'extend' then
  if redis.call('SISMEMBER', g, token) == 0 then
    return 0
  end
  lengthen(h, px)
  lengthen(g, px)
  return 1
end
-- release, drop
if redis.call('SREM', g, token) == 0 then
  return 0
end
if redis.call('HINCRBY', h, owner, -1) <= 0 then
  redis.call('HDEL', h, owner)
end
if redis.call('HLEN', h) == 0 then
  redis.call('DEL', h, g)
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], '')
  end
end
return 1
