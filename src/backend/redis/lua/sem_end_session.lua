-- Ends session ARGV[2] here: its entries go at once and waiters are told.
local entries = redis.call('HGETALL', KEYS[3])
local gone = 0
for i = 1, #entries, 2 do
  if string.match(entries[i + 1], '^%d+ (%S+)') == ARGV[2] then
    redis.call('ZREM', KEYS[2], entries[i])
    redis.call('HDEL', KEYS[3], entries[i])
    gone = gone + 1
  end
end
redis.call('HDEL', KEYS[4], ARGV[2])
if gone > 0 then
  redis.call('PUBLISH', ARGV[1], 'ended')
end
return gone
