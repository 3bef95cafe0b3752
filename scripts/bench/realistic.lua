-- wrk script of the proxy benchmark's realistic path (scripts/bench-proxy): the body that
-- `bench-load --realistic --print-body` prints, sent with a case reference of its own in each
-- request (six letters from a counter, where the body holds @@@@@@), as bench-load sends it.
-- BODY names the body's file; KEY the API key (default the quickstart's agent key).
local file = assert(io.open(os.getenv("BODY"), "r"))
local body = file:read("*a"):gsub("%s+$", "")
file:close()
local headers = {
  ["content-type"] = "application/json",
  ["authorization"] = "Bearer " .. (os.getenv("KEY") or "sk-atdp-demo-agent"),
}
local counter = 0

local function reference(n)
  local out = {}
  for i = 6, 1, -1 do
    out[i] = string.char(97 + n % 26)
    n = math.floor(n / 26)
  end
  return table.concat(out)
end

request = function()
  counter = counter + 1
  local stamped = body:gsub("@@@@@@", reference(counter))
  return wrk.format("POST", "/v1/chat/completions", headers, stamped)
end
