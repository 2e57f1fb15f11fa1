-- An election's leader record (election.go): the leader's term, since when
-- it leads, a revision and its value, kept beside the election's lock key
-- and written only where that key holds the leader's token.
-- KEYS[1]: the election's lock key
-- KEYS[2]: its leader record
-- ARGV[1]: 'read' or 'write'
-- read returns {the lock key's value or false, the record or false}.
-- write: ARGV[2] the leader's token, ARGV[3] the record, ARGV[4] the
-- channel on which the record is announced; returns 1 if the key holds the
-- token (the record is written and announced), 0 if not.
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
if get(KEYS[1]) ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[3])
return 1
