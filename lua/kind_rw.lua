-- A read-write lock: many readers or one writer. A writer that finds readers
-- leaves a mark that keeps new readers out until it gets the lock (or its
-- mark expires), so that a stream of readers cannot starve it.
-- KEYS[1]: the lock key: while a writer holds it, a string holding the
--          writer's token; while readers hold it, a sorted set of reader
--          token -> the node time (ms) its hold ends, marked as the readers'
--          by the member 'readers' at +inf (a semaphore's set has no mark)
-- KEYS[2]: {key}:writer-waiting, a string holding a waiting writer's ID
-- KEYS[3]: the key's fencing counter, when ARGV[5] is not 0
-- ARGV[1]: acquire, extend, release, drop (after a failed attempt: keeps the
--          writer's mark), leave (a writer gives up: removes it), unmark (a
--          writer that won elsewhere: removes its mark only) or handoff
--          (a writer takes the lock from the writer whose token is ARGV[8],
--          the next of its process in line; see handoff.lua)
-- ARGV[2]: our token; ARGV[3]: ttl in ms; ARGV[4]: release channel or ''
-- ARGV[5]: to draw the fencing counter on acquire, how long (ms) it is
--          kept once the node's clock has passed it (prelude.lua); else 0
-- ARGV[6]: r for a reader, w for a writer
-- ARGV[7]: the writer's waiter ID, the same for all the attempts of one
--          Acquire (each attempt has its own token)
-- A key held by a lock of another kind (a hash, a semaphore's set, another
-- holder's string) counts as held against us.
-- ARGV[8]: for handoff, the releasing writer's token
-- ARGV[9]: for a writer's handoff and release, the run's token prefix
--          (of_run, prelude.lua): a token of the run left here is taken
--          or deleted as the holder's is
-- Acquire returns {0} (granted, prelude.lua) when the lock is held against
-- us, else {1, the fencing counter (1 when not fenced)}. Handoff returns
-- {0} when the lock is held against us, else {1, c, w, found} as
-- handoff.lua does (c the fencing counter, w 1 if a process listens on the
-- release channel ARGV[4], found 1 if the releasing writer's token was
-- there, 2 if ours was: a resend). The others return 1 if our hold was
-- there.
local k, ww = KEYS[1], KEYS[2]
local op, token, px, role, waiter = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[6], ARGV[7]
local now = node_ms()
local kind = redis.call('TYPE', k).ok
local readers = kind == 'zset' and redis.call('ZSCORE', k, 'readers') ~= false
local function fence()
  return counter_or_one(KEYS[3], ARGV[5])
end
local function announce()
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], '')
  end
end
-- A hold's end and the key's time to live are lengthened, never shortened
-- (lengthen, prelude.lua).

-- Drops the readers whose hold has ended; deletes the set when none is
-- left, and reports whether it did.
local function purge()
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  if redis.call('ZCARD', k) <= 1 then
    redis.call('DEL', k)
    return true
  end
  return false
end

if role == 'r' then
  if op == 'handoff' then
    return {0} -- readers hold together: none is handed over
  end
  if op == 'acquire' then
    if kind ~= 'none' and not readers then
      return granted(0) -- a writer, or a lock of another kind
    end
    if readers then
      purge()
    end
    if not redis.call('ZSCORE', k, token) and redis.call('EXISTS', ww) == 1 then
      return granted(0)
    end
    redis.call('ZADD', k, 'inf', 'readers')
  elseif op == 'extend' then
    if not readers or not redis.call('ZSCORE', k, token) then
      return 0
    end
  else
    if not readers or redis.call('ZREM', k, token) == 0 then
      return 0
    end
    if purge() then
      announce()
    end
    return 1
  end
  local ends = tonumber(redis.call('ZSCORE', k, token))
  if not ends or ends < now + px then
    redis.call('ZADD', k, now + px, token)
  end
  lengthen(k, px)
  if op == 'acquire' then
    return granted(fence())
  end
  return 1
end

-- the writer
local held = kind == 'string' and redis.call('GET', k)
local ours = held == token
local function take()
  if ours then
    lengthen(k, px)
    return fence()
  end
  if kind ~= 'none' and not readers then
    return 0 -- another writer, or a lock of another kind
  end
  local mark = redis.call('GET', ww)
  if mark and mark ~= waiter then
    return 0 -- another writer waits first
  end
  if readers and not purge() then
    redis.call('SET', ww, waiter, 'PX', px)
    return 0
  end
  redis.call('SET', k, token, 'PX', px)
  if mark then
    redis.call('DEL', ww)
  end
  return fence()
end
if op == 'acquire' then
  return granted(take())
elseif op == 'handoff' then
  local r, c = 0, 0
  if held == ARGV[8] or not ours and of_run(held, ARGV[9]) then
    if held == ARGV[8] then
      r = 1
    end
    redis.call('SET', k, token, 'PX', px)
    c = fence()
  else
    if ours then
      r = 2 -- a resend: its first run is the one that knew
    end
    c = take()
    if c == 0 then
      return {0}
    end
  end
  return handoff_result(c, r, ARGV[4])
elseif op == 'extend' then
  if ours then
    lengthen(k, px)
    return 1
  end
  return 0
elseif op == 'unmark' then
  if redis.call('GET', ww) == waiter then
    redis.call('DEL', ww)
    return 1
  end
  return 0
end
local n = 0
if ours or op == 'release' and of_run(held, ARGV[9]) then
  redis.call('DEL', k)
  if ours then
    n = 1
  end
  announce()
end
if op ~= 'drop' and redis.call('GET', ww) == waiter then
  redis.call('DEL', ww)
  announce()
end
return n
