-- Appends entry ARGV[2] (ARGV[3] permits, session ARGV[4] kept until now + ARGV[5] ms, since
-- ARGV[6] ms, owner ARGV[7], and on a fair semaphore the tag ARGV[8] when given), or finds it
-- again (a retried request). Its token is the server's time in µs, above every earlier token:
-- strictly increasing, also across a failover that lost the last tokens (unless the new
-- primary's clock is behind).
-- Returns {'nosem'}, {'heavy', CAPACITY} (nothing queued), {'plain'} (a tag on a plain
-- semaphore: nothing queued), {'noclass', CLASSES} (a class the fair semaphore lacks: nothing
-- queued), {'ok', TOKEN, CAPACITY, FLOOR, then TOKEN, VALUE pairs of the queue up to the
-- entry}, or on a fair semaphore {'fair', TOKEN, CAPACITY, FLOOR, FAIR (see fair_item), then
-- TOKEN, VALUE pairs of the whole queue}.
local cap = redis.call('HMGET', KEYS[1], 'capacity', 'floor', 'last')
if not cap[1] then
  return {'nosem'}
end
local fair = fair_item()
if ARGV[8] and fair == '' then
  return {'plain'}
end
local capacity = tonumber(cap[1])
if ARGV[8] and fair ~= '!' then
  local class = string.match(ARGV[8], '^\n%d+\n([^\n]*)\n')
  local classes = redis.call('HGET', KEYS[5], 'classes') or ''
  local known = class == ''
  for name in string.gmatch(classes, '([^,=]+)=[^,]*') do
    known = known or name == class
  end
  if not known then
    return {'noclass', classes}
  end
end
prune()
local token = redis.call('ZSCORE', KEYS[2], ARGV[2])
local fresh = not token
if token then
  token = tonumber(token)
  if tonumber(ARGV[3]) > capacity then
    redis.call('ZREM', KEYS[2], ARGV[2])
    redis.call('HDEL', KEYS[3], ARGV[2])
    return {'heavy', capacity}
  end
else
  if tonumber(ARGV[3]) > capacity then
    return {'heavy', capacity}
  end
  token = math.max(tonumber(cap[3]) + 1, now_us)
  redis.call('HSET', KEYS[1], 'last', int(token))
  redis.call('ZADD', KEYS[2], int(token), ARGV[2])
  local value = ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[6] .. ' ' .. ARGV[7]
  redis.call('HSET', KEYS[3], ARGV[2], value .. (ARGV[8] or ''))
end
redis.call('HSET', KEYS[4], ARGV[4], int(now_ms + tonumber(ARGV[5])))
if fair == '' then
  local out = {'ok', int(token), cap[1], cap[2]}
  for _, v in ipairs(queue_upto(token)) do
    out[#out + 1] = v
  end
  return out
end
local queue = queue_upto(nil)
if fresh and fair ~= '!' then
  mark_if_alone(queue, int(token), tonumber(ARGV[3]), capacity)
end
local out = {'fair', int(token), cap[1], cap[2], fair_item()}
for _, v in ipairs(queue) do
  out[#out + 1] = v
end
return out
