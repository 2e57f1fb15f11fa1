-- A fair lock: waiters are granted it in the order of their tickets.
-- KEYS[1]: the lock key, a string holding the holder's token
-- KEYS[2]: {key}:queue, a sorted set: waiter ID -> ticket
-- KEYS[3]: {key}:queue-deadlines, a sorted set: waiter ID -> the node time
--          (ms) after which a waiter that stopped trying leaves the queue
-- KEYS[4]: {key}:tickets, the ticket counter (a counter like a fencing one)
-- KEYS[5]: the key's fencing counter, when ARGV[5] is not 0
-- ARGV[1]: ticket (returns {n, clock}, a Ticket of internal/nodeio: the
--          next ticket n, clock 1 when n is the node's clock, 0 when the
--          counter is ahead of it: see drawTicket), acquire, extend, release, drop
--          (after a failed attempt: stays queued), leave (gives up its place)
--          or dequeue (leaves the queue once the lock was won elsewhere)
-- ARGV[2]: our token; ARGV[3]: ttl in ms (for ticket: how long the ticket
--          counter is kept once the node's clock has passed it, prelude.lua);
-- ARGV[4]: release channel or ''
-- ARGV[5]: to draw the fencing counter on acquire, how long (ms) it is
--          kept once the node's clock has passed it (prelude.lua); else 0
-- ARGV[6]: our ticket; ARGV[7]: how long (ms) a waiter keeps its place
--          without trying again; ARGV[8]: our waiter ID, the same for all the
--          attempts of one Acquire (each attempt has its own token)
-- A release (on every node, whether it held the key there or not) and a
-- leave by the first in line publish the ID of the waiter now first in line
-- (or '' for none) on the release channel.
-- A key held by a lock of another kind (not a string: GET fails, and pcall
-- returns the error as a table) counts as held by someone else.
-- Acquire queues us (if we are not) and returns {0} (granted, prelude.lua)
-- unless the key is free and we are first in the queue; then it takes the
-- key, leaves the queue and returns {1, the fencing counter (1 when not
-- fenced)}.
local key, q, dl = KEYS[1], KEYS[2], KEYS[3]
local op, token, px, waiter = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[8]
if op == 'ticket' then
  local n, clock = counter_draw(KEYS[4], px)
  local f = 0
  if clock then
    f = 1
  end
  return {n, f}
end
local now = node_ms()
-- enqueue puts us in line with our ticket, for our patience
local function enqueue()
  local patience = tonumber(ARGV[7])
  redis.call('ZADD', q, ARGV[6], waiter)
  redis.call('ZADD', dl, now + patience, waiter)
  redis.call('PEXPIRE', q, 2 * patience)
  redis.call('PEXPIRE', dl, 2 * patience)
end
local function unqueue(who)
  redis.call('ZREM', q, who)
  redis.call('ZREM', dl, who)
end
if op == 'acquire' then
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', dl, '-inf', now)) do
    unqueue(gone)
  end
  local v = redis.pcall('GET', key)
  if v == token then
    lengthen(key, px)
  else
    enqueue()
    if v or redis.call('ZRANGE', q, 0, 0)[1] ~= waiter then
      return granted(0)
    end
    redis.call('SET', key, token, 'PX', px)
    unqueue(waiter)
  end
  return granted(counter_or_one(KEYS[5], ARGV[5]))
elseif op == 'dequeue' then
  unqueue(waiter)
  return 1
elseif op == 'extend' then
  if redis.pcall('GET', key) == token then
    lengthen(key, px)
    return 1
  end
  return 0
end
-- release, drop, leave: the announcement names the first in line, so that
-- only that waiter tries at once
local function announce()
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], redis.call('ZRANGE', q, 0, 0)[1] or '')
  end
end
local n = 0
if op == 'leave' then
  local first = redis.call('ZRANGE', q, 0, 0)[1]
  unqueue(waiter)
  if first == waiter then
    announce()
  end
end
if redis.pcall('GET', key) == token then
  redis.call('DEL', key)
  n = 1
  if op == 'drop' then
    -- the attempt took the key here, which took us out of the queue, and
    -- failed elsewhere: we stay first in line, as we were
    enqueue()
  end
end
if op == 'release' then
  -- on every node, held or not: the waiter listens on one of them
  announce()
end
return n
