-- The live announcements of a board: a flat list id, value, id, value… (expired ones left out).
-- KEYS[1]: the board (a hash: id -> "EXPIRES_MS:VALUE").
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local sep = string.find(all[i + 1], ':', 1, true)
  local until_ms = sep and tonumber(string.sub(all[i + 1], 1, sep - 1))
  if until_ms and until_ms > now then
    out[#out + 1] = all[i]
    out[#out + 1] = string.sub(all[i + 1], sep + 1)
  end
end
return out
