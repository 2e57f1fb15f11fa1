-- A lock on several keys at once, all or nothing on this node.
-- KEYS[1..m]: the lock keys, each a string holding the token
-- KEYS[m+1..2m]: their fencing counters, when ARGV[5] is not 0
-- ARGV[1]: acquire, extend, release, drop or handoff (take the keys from
-- the holder whose token is ARGV[7+m], the next of its process in line; see
-- handoff.lua)
-- ARGV[2]: our token; ARGV[3]: ttl in ms; ARGV[4]: '1' to announce a release
-- on each key's channel, '' not to
-- ARGV[5]: to draw the fencing counters on acquire, how long (ms) they are
--          kept once the node's clock has passed them (prelude.lua); else 0
-- ARGV[6]: m, the number of lock keys
-- ARGV[7..6+m]: the keys' release channels
-- ARGV[7+m]: for handoff, the releasing holder's token
-- ARGV[8+m]: for handoff and release, the run's token prefix (of_run,
--            prelude.lua): a token of the run left on a key is taken or
--            deleted as the holder's is
-- A key held by a lock of another kind (not a string: GET fails, and pcall
-- returns the error as a table) counts as held by another holder.
-- Acquire returns {0} (granted, prelude.lua) when another holder has any
-- of the keys, else {1, the fencing counter (1 when not fenced)}: every
-- key's counter draws its next value and then is set to the highest of
-- them, so that the answer is a token that no key on this node has reached
-- before and that every key's counter now stores.
-- Handoff returns {0} when another holder has any of the keys, else
-- {1, c, w, found} as handoff.lua does (c as acquire's, w 1 if a process
-- listens on any key's release channel, found 1 if any key held the
-- releasing holder's token, 2 if a key held ours: a resend).
-- Extend returns 1 if every key held our token; release and drop return 1 if
-- any key held it.
local op, token, px, m = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[6])
local run = ARGV[8 + m]
-- Takes every key for our token when none is held by another than us,
-- from (nil but for handoff) or the run; returns 0 when one is, else the
-- fencing counter, and what it found (see handoff.lua).
local function take(from)
  for i = 1, m do
    local v = redis.pcall('GET', KEYS[i])
    if v and v ~= token and v ~= from and not (from and of_run(v, run)) then
      return 0, 0
    end
  end
  local r = 0
  for i = 1, m do
    local v = redis.pcall('GET', KEYS[i])
    if v == token then
      r = 2 -- a resend: its first run is the one that knew
      lengthen(KEYS[i], px)
    else
      if v == from and r == 0 then
        r = 1
      end
      redis.call('SET', KEYS[i], token, 'PX', px)
    end
  end
  if ARGV[5] == '0' then
    return 1, r
  end
  local c = 0
  for i = 1, m do
    c = math.max(c, counter_next(KEYS[m + i], ARGV[5]))
  end
  for i = 1, m do
    counter_raise(KEYS[m + i], c, ARGV[5])
  end
  return c, r
end
if op == 'acquire' then
  return granted((take(nil)))
elseif op == 'handoff' then
  local c, r = take(ARGV[7 + m])
  if c == 0 then
    return {0}
  end
  local w = 0
  for i = 1, m do
    if redis.call('PUBSUB', 'NUMSUB', ARGV[6 + i])[2] > 0 then
      w = 1
    end
  end
  return {1, c, w, r}
elseif op == 'extend' then
  for i = 1, m do
    if redis.pcall('GET', KEYS[i]) ~= token then
      return 0
    end
  end
  for i = 1, m do
    lengthen(KEYS[i], px)
  end
  return 1
end
local n = 0
for i = 1, m do
  local v = redis.pcall('GET', KEYS[i])
  if v == token or op == 'release' and of_run(v, run) then
    redis.call('DEL', KEYS[i])
    if v == token then
      n = n + 1
    end
    if ARGV[4] ~= '' then
      redis.call('PUBLISH', ARGV[6 + i], '')
    end
  end
end
if n > 0 then
  return 1
end
return 0
