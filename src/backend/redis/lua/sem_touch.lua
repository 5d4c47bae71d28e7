-- Keeps session ARGV[2] alive here until now + ARGV[3] ms and checks that its entries
-- ARGV[5..] are all still queued. Its other entries with a token up to ARGV[4] (the highest
-- the session saw confirmed here) are strays, released by it but brought back by a failover
-- that lost the release: they go. Returns {'unknown'} when the session is unknown here
-- although it has entries to check (it expired, was ended, or a failover lost it), else the ids
-- of its entries missing (the caller tells a loss from its own release sent meanwhile).
prune()
if #ARGV > 4 and not redis.call('HGET', KEYS[4], ARGV[2]) then
  return {'unknown'}
end
redis.call('HSET', KEYS[4], ARGV[2], int(now_ms + tonumber(ARGV[3])))
local expected, missing = {}, {}
for i = 5, #ARGV do
  expected[ARGV[i]] = true
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then
    missing[#missing + 1] = ARGV[i]
  end
end
local upto = tonumber(ARGV[4])
if upto > 0 then
  local entries = redis.call('HGETALL', KEYS[3])
  local strays = 0
  for i = 1, #entries, 2 do
    local id = entries[i]
    if not expected[id] and string.match(entries[i + 1], '^%d+ (%S+)') == ARGV[2] then
      local token = redis.call('ZSCORE', KEYS[2], id)
      if token and tonumber(token) <= upto then
        redis.call('ZREM', KEYS[2], id)
        redis.call('HDEL', KEYS[3], id)
        strays = strays + 1
      end
    end
  end
  if strays > 0 then
    redis.call('PUBLISH', ARGV[1], 'strays')
  end
end
return missing
