-- Reads what this node holds for a lock key, for Client.Inspect; it writes
-- nothing.
-- KEYS[1]: the lock key
-- KEYS[2]: {key}:grants, a reentrant lock's holds
-- KEYS[3]: {key}:permits, a semaphore's K
-- Returns {type, pttl, now, ...}: type is the key's Redis type ('none' when
-- free), pttl its time to live in ms (-1 without, -2 when gone), now the
-- node's time in ms; then for a string its value (a token, and the
-- metadata after a space); for a hash (a reentrant lock) its owner and the
-- tokens of its holds; for a sorted set (a semaphore's permits, or a
-- read-write lock's readers, marked by the member 'readers') a semaphore's
-- K ('' when none is kept), then each member and its end (node time, ms).
local kind = redis.call('TYPE', KEYS[1])['ok']
local t = redis.call('TIME')
local out = {kind, redis.call('PTTL', KEYS[1]), tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
if kind == 'string' then
  out[4] = redis.call('GET', KEYS[1])
elseif kind == 'hash' then
  out[4] = redis.call('HKEYS', KEYS[1])[1] or ''
  for _, m in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    out[#out + 1] = m
  end
elseif kind == 'zset' then
  out[4] = redis.call('GET', KEYS[3]) or ''
  local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
