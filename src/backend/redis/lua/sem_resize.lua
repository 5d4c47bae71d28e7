-- Sets capacity ARGV[3] and floor ARGV[4] if the record is still at version ARGV[2].
-- Returns {'nosem'}, {'conflict'} or {'ok', NEW_VER, then TOKEN, VALUE pairs of the queue as
-- the write saw it} (the writer checks its floor against that queue).
local ver = redis.call('HGET', KEYS[1], 'ver')
if not ver then
  return {'nosem'}
end
if ver ~= ARGV[2] then
  return {'conflict'}
end
prune()
local next_ver = int(tonumber(ver) + 1)
redis.call('HSET', KEYS[1], 'capacity', ARGV[3], 'floor', ARGV[4], 'ver', next_ver)
redis.call('PUBLISH', ARGV[1], 'capacity')
local out = {'ok', next_ver}
for _, v in ipairs(queue_upto(nil)) do
  out[#out + 1] = v
end
return out
