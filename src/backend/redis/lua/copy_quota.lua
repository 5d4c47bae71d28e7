-- Brings a bucket's copy of a limit's quota up to a newer version (never back).
-- KEYS[1]: the bucket's quota copies. ARGV[1]: the limit; ARGV[2]: "VERSION:QUOTA".
-- Returns 1 if the copy was written, 0 if it was as new already.
local function version(s)
  local sep = string.find(s, ':', 1, true)
  return sep and tonumber(string.sub(s, 1, sep - 1)) or -1
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and version(cur) >= version(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
