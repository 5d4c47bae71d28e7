-- Puts (or refreshes) one announcement on a board, kept until the server's time passes
-- now + ARGV[2] ms unless put again; drops the board's expired ones on the way.
-- KEYS[1]: the board (a hash: id -> "EXPIRES_MS:VALUE"). ARGV[1]: id; ARGV[2]: TTL in ms;
-- ARGV[3]: the value.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local sep = string.find(all[i + 1], ':', 1, true)
  local until_ms = sep and tonumber(string.sub(all[i + 1], 1, sep - 1))
  if not until_ms or until_ms <= now then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[2])) .. ':' .. ARGV[3])
return 1
