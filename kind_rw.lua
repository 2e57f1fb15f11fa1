-- A read-write lock: many readers or one writer. A writer that finds readers
-- leaves a mark that keeps new readers out until it gets the lock (or its
-- mark expires), so that a stream of readers cannot starve it.
-- KEYS[1]: the lock key, a string holding the writer's token
-- KEYS[2]: {key}:readers, a sorted set: reader token -> expiry (node time, ms)
-- KEYS[3]: {key}:writer-waiting, a string holding a waiting writer's ID
-- KEYS[4]: the key's fencing counter, when ARGV[5] is 1
-- ARGV[1]: acquire, extend, release, drop (after a failed attempt: keeps the
--          writer's mark) or leave (a writer gives up: removes it)
-- ARGV[2]: our token; ARGV[3]: ttl in ms; ARGV[4]: release channel or ''
-- ARGV[5]: 1 to increment the fencing counter on acquire, else 0
-- ARGV[6]: r for a reader, w for a writer
-- ARGV[7]: the writer's waiter ID, the same for all the attempts of one
--          Acquire (each attempt has its own token)
-- Acquire returns 0 when the lock is held against us, else the fencing
-- counter (1 when not fenced). The others return 1 if our hold was there.
local w, r, ww = KEYS[1], KEYS[2], KEYS[3]
local op, token, px, role, waiter = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[6], ARGV[7]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fence()
  if ARGV[5] == '1' then
    return redis.call('INCR', KEYS[4])
  end
  return 1
end
-- A hold's end and the keys' time to live are lengthened, never shortened
-- (see extend.lua).
local function lengthen(k)
  if redis.call('PTTL', k) < px then
    redis.call('PEXPIRE', k, px)
  end
end
local function read()
  local ends = tonumber(redis.call('ZSCORE', r, token))
  if not ends or ends < now + px then
    redis.call('ZADD', r, now + px, token)
  end
  lengthen(r)
end
local function announce()
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], '')
  end
end

if role == 'r' then
  if op == 'acquire' then
    redis.call('ZREMRANGEBYSCORE', r, '-inf', now)
    if not redis.call('ZSCORE', r, token) then
      if redis.call('EXISTS', w) == 1 or redis.call('EXISTS', ww) == 1 then
        return 0
      end
    end
    read()
    return fence()
  elseif op == 'extend' then
    if not redis.call('ZSCORE', r, token) then
      return 0
    end
    read()
    return 1
  end
  if redis.call('ZREM', r, token) == 0 then
    return 0
  end
  announce()
  return 1
end

-- the writer
if op == 'acquire' then
  local v = redis.call('GET', w)
  if v == token then
    lengthen(w)
    return fence()
  end
  if v then
    return 0
  end
  local mark = redis.call('GET', ww)
  if mark and mark ~= waiter then
    return 0 -- another writer waits first
  end
  redis.call('ZREMRANGEBYSCORE', r, '-inf', now)
  if redis.call('ZCARD', r) > 0 then
    redis.call('SET', ww, waiter, 'PX', px)
    return 0
  end
  redis.call('SET', w, token, 'PX', px)
  if mark then
    redis.call('DEL', ww)
  end
  return fence()
elseif op == 'extend' then
  if redis.call('GET', w) == token then
    lengthen(w)
    return 1
  end
  return 0
end
local n = 0
if redis.call('GET', w) == token then
  redis.call('DEL', w)
  n = 1
  announce()
end
if op ~= 'drop' and redis.call('GET', ww) == waiter then
  redis.call('DEL', ww)
  announce()
end
return n
