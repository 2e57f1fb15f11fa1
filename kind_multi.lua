-- A lock on several keys at once, all or nothing on this node.
-- KEYS[1..m]: the lock keys, each a string holding the token
-- KEYS[m+1..2m]: their fencing counters, when ARGV[5] is 1
-- ARGV[1]: acquire, extend, release or drop
-- ARGV[2]: our token; ARGV[3]: ttl in ms; ARGV[4]: '1' to announce a release
-- on each key's channel, '' not to
-- ARGV[5]: 1 to draw the fencing counters on acquire, else 0
-- ARGV[6]: m, the number of lock keys
-- ARGV[7..6+m]: the keys' release channels
-- A key held by a lock of another kind (not a string: GET fails, and pcall
-- returns the error as a table) counts as held by another holder.
-- Acquire returns 0 when another holder has any of the keys, else the
-- fencing counter (1 when not fenced): every key's counter draws its next value and
-- then set to the highest of them, so that the answer is a token that no key
-- on this node has reached before and that every key's counter now stores.
-- Extend returns 1 if every key held our token; release and drop return 1 if
-- any key held it.
local op, token, px, m = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[6])
-- a lock's time to live is lengthened, never shortened (see extend.lua)
local function lengthen(k)
  if redis.call('PTTL', k) < px then
    redis.call('PEXPIRE', k, px)
  end
end
if op == 'acquire' then
  for i = 1, m do
    local v = redis.pcall('GET', KEYS[i])
    if v and v ~= token then
      return 0
    end
  end
  for i = 1, m do
    if redis.pcall('GET', KEYS[i]) == token then
      lengthen(KEYS[i])
    else
      redis.call('SET', KEYS[i], token, 'PX', px)
    end
  end
  if ARGV[5] ~= '1' then
    return 1
  end
  local c = 0
  for i = 1, m do
    c = math.max(c, counter_next(KEYS[m + i]))
  end
  for i = 1, m do
    counter_raise(KEYS[m + i], c)
  end
  return c
elseif op == 'extend' then
  for i = 1, m do
    if redis.pcall('GET', KEYS[i]) ~= token then
      return 0
    end
  end
  for i = 1, m do
    lengthen(KEYS[i])
  end
  return 1
end
local n = 0
for i = 1, m do
  if redis.pcall('GET', KEYS[i]) == token then
    redis.call('DEL', KEYS[i])
    n = n + 1
    if ARGV[4] ~= '' then
      redis.call('PUBLISH', ARGV[6 + i], '')
    end
  end
end
if n > 0 then
  return 1
end
return 0
