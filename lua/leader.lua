-- An election's leader record (election.go): the leader's term, since when
-- it leads, a revision and its value, kept beside the election's lock key
-- and written only where that key holds the leader's token.
-- KEYS[1]: the election's lock key
-- KEYS[2]: its leader record
-- ARGV[1]: 'read', 'write', 'keep' or 'drop'
-- read returns {the lock key's value or false, the record or false}.
-- write: ARGV[2] the leader's token, ARGV[3] how long the record lives
-- (ms), ARGV[4] the record, ARGV[5] the channel on which it is announced;
-- keep: ARGV[2] the token, ARGV[3] how long the record lives from now.
-- Both return 1 if the key holds the token (and do it), 0 if not.
-- drop: ARGV[2] the token; deletes the record if it is that token's (the
-- key is not looked at: the leadership is over); returns 1 if it did.
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return false
  end
  return v
end
if ARGV[1] == 'read' then
  return {get(KEYS[1]), get(KEYS[2])}
end
if ARGV[1] == 'drop' then
  local r = get(KEYS[2])
  if r and string.sub(r, 1, #ARGV[2] + 1) == ARGV[2] .. ' ' then
    return redis.call('DEL', KEYS[2])
  end
  return 0
end
if get(KEYS[1]) ~= ARGV[2] then
  return 0
end
if ARGV[1] == 'keep' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[4])
return 1
