-- Shared piece (included, never run alone): Lua compares strings by the server's locale; product
-- ids are ordered by their bytes, so they are compared here.
local function bytes_before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
