-- The prelude: its functions that a script uses are put before it (see
-- scripts.go, scriptSource): the node's time,
-- lengthening a key, fencing and ticket counters, and the comparison of
-- fencing tokens.

-- node_ms is the node's time in milliseconds.
local function node_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- lengthen sets key k's time to live to px milliseconds unless it is
-- longer already: a lock's keys are lengthened, never shortened (a call
-- that lands late must not end a key before the validity its holder
-- still reports; see extend.lua).
local function lengthen(k, px)
  if redis.call('PTTL', k) < px then
    redis.call('PEXPIRE', k, px)
  end
end
--
-- Fencing and ticket counters. A counter's next value is one more
-- than its last, or the node's clock in microseconds when that is more.
-- Every draw and raise sets the counter to expire keep milliseconds after
-- the node's clock has passed its value (keep is the fence horizon: the
-- lock's ttl, or the Client's WithFenceHorizon when longer), or later if it
-- was to expire later already. A counter that is gone has been passed by
-- the node's clock, so a value drawn from the clock again is above every
-- value it gave, unless the clock was set back since by more than keep in
-- all (it reads less than an earlier reading minus keep). The keys a node
-- keeps for counters are those of the locks of the last horizon or so, not
-- of every key ever locked. The values stay below 2^53 (the clock until the
-- year 2255), exact in Lua's numbers.
-- counter_draw also returns whether the value is the clock's (rather than
-- one more than the last, which is ahead of the clock); counter_next
-- returns the value alone.
local function counter_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- counter_set sets counter k to n, to expire keep ms after the node's clock
-- (now, in microseconds) has passed n; 1 ms more covers the rounding. It
-- never expires sooner than it would have: another Client may have asked
-- for a longer horizon (WithFenceHorizon). The time to live is at most the
-- whole milliseconds of the longest Go Duration (about 292 years, keep's
-- own most), which every server holds exactly.
local function counter_set(k, n, now, keep)
  local ahead = math.max(0, math.ceil((n - now) / 1000))
  local px = math.max(ahead + math.max(1, math.floor(tonumber(keep))) + 1, redis.call('PTTL', k))
  px = math.min(px, 9223372036854)
  redis.call('SET', k, string.format('%d', n), 'PX', string.format('%d', px))
end

local function counter_draw(k, keep)
  local now = counter_now()
  local n = math.max(tonumber(redis.call('GET', k) or '0') + 1, now)
  counter_set(k, n, now, keep)
  return n, n == now
end

local function counter_next(k, keep)
  return (counter_draw(k, keep))
end

-- counter_raise sets counter k to at least n; never lowers it.
local function counter_raise(k, n, keep)
  if tonumber(redis.call('GET', k) or '0') < n then
    counter_set(k, n, counter_now(), keep)
  end
end

-- token_below reports whether fencing token a is below token b, both in
-- decimal without leading zeros: compared as the integers they are, as a
-- Lua number (a double) is exact only below 2^53, and two tokens above it
-- (a resource's tokens may be any uint64) could compare equal.
local function token_below(a, b)
  return #a < #b or (#a == #b and a < b)
end

-- counter_or_one is the fencing token of an acquire: the next value of
-- counter k, kept keep ms once passed (counter_next), or 1 when the lock
-- is not fenced (keep is '0').
local function counter_or_one(k, keep)
  if keep ~= '0' then
    return counter_next(k, keep)
  end
  return 1
end

-- granted is an acquire's reply (a Grant, internal/nodeio): {1, c} when
-- the node holds our token now, c its fencing counter (counter_or_one);
-- {0} when c is 0, refused.
local function granted(c)
  if c == 0 then
    return {0}
  end
  return {1, c}
end

-- handoff_result is a hand-off's reply (a HandOff, internal/nodeio):
-- {1, c, w, found}, c the fencing counter, w 1 when a process listens on
-- channel (its release channel), found what the hand-off found (see
-- handoff.lua).
local function handoff_result(c, found, channel)
  local w = 0
  if redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
    w = 1
  end
  return {1, c, w, found}
end

-- of_run reports whether v, a key's value, is a token of the run of
-- hand-offs whose tokens begin with run (nil or '' for none): a holder of
-- this run handed the key on, but the hand-off never ran here, so the
-- value is ours, left behind, and the run's later hand-offs and its
-- release take it.
local function of_run(v, run)
  return run ~= nil and run ~= '' and type(v) == 'string' and string.sub(v, 1, #run) == run
end
