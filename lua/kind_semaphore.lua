-- A semaphore: at most K holders of one resource at once, each with its own
-- permit that expires on its own.
-- KEYS[1]: the resource key, a sorted set: token -> expiry (node time, ms)
-- KEYS[2]: {key}:permits, the resource's K (kept as long as the set)
-- KEYS[3]: the key's fencing counter, when ARGV[5] is not 0
-- ARGV[1]: acquire, extend, release or drop
-- ARGV[2]: the permit's token; ARGV[3]: ttl in ms; ARGV[4]: release channel or ''
-- ARGV[5]: to draw the fencing counter on acquire, how long (ms) it is
--          kept once the node's clock has passed it (prelude.lua); else 0
-- ARGV[6]: K
-- Acquire returns {held, counter} (granted, prelude.lua): {0} when K
-- permits are held, else {1, the fencing counter (1 when not fenced)}; an
-- error, WRONGPERMITS, when the resource was created with
-- another K (compared as given, in decimal: a K too large for Lua's numbers
-- to tell from its neighbours is still told apart). The
-- others return 1 if the permit was there. A key held by a lock of another
-- kind (not a sorted set, or the readers' set of a read-write lock, which
-- has the member 'readers') counts as held against us: every operation
-- is refused.
local z, lim = KEYS[1], KEYS[2]
local op, token, px, k = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[6])
local kind = redis.call('TYPE', z).ok
if kind ~= 'none' and (kind ~= 'zset' or redis.call('ZSCORE', z, 'readers')) then
  return op == 'acquire' and granted(0) or 0
end
local now = node_ms()
-- A permit's end and the keys' time to live are lengthened, never
-- shortened (lengthen, prelude.lua).
local function hold()
  local ends = tonumber(redis.call('ZSCORE', z, token))
  if not ends or ends < now + px then
    redis.call('ZADD', z, now + px, token)
  end
end
if op == 'acquire' then
  local had = redis.call('GET', lim)
  if had and had ~= ARGV[6] then
    return redis.error_reply('WRONGPERMITS semaphore ' .. z .. ' has ' .. had .. ' permits, not ' .. ARGV[6])
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  if not redis.call('ZSCORE', z, token) and redis.call('ZCARD', z) >= k then
    return granted(0)
  end
  hold()
  if not had then
    redis.call('SET', lim, ARGV[6])
  end
  lengthen(z, px)
  lengthen(lim, px)
  return granted(counter_or_one(KEYS[3], ARGV[5]))
elseif op == 'extend' then
  if not redis.call('ZSCORE', z, token) then
    return 0
  end
  hold()
  lengthen(z, px)
  lengthen(lim, px)
  return 1
end
if redis.call('ZREM', z, token) == 0 then
  return 0
end
if redis.call('ZCARD', z) == 0 then
  redis.call('DEL', z, lim)
end
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], '')
end
return 1
