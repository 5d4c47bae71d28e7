-- Stores a limit's quota, creating it if absent; returns the new version: one more than the
-- old, or the server's time in microseconds if that is higher.
-- KEYS[1]: the quotas (a hash: limit -> "VERSION:QUOTA"). ARGV[1]: the limit; ARGV[2]: quota.
local t = redis.call('TIME')
local v = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local sep = string.find(old, ':', 1, true)
  local was = sep and tonumber(string.sub(old, 1, sep - 1))
  if not was then
    error({err = 'FOREIGN the quota of ' .. ARGV[1] .. ' holds a value clusterlimit did not write'})
  end
  if was + 1 > v then
    v = was + 1
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', v) .. ':' .. ARGV[2])
return v
