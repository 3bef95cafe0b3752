-- wrk script of the proxy benchmark's cheap path (scripts/bench-proxy): the short request
-- without personal data that `bench-load --print-body` prints. BODY names the body's file; KEY
-- the API key (default the quickstart's agent key).
local file = assert(io.open(os.getenv("BODY"), "r"))
local body = file:read("*a"):gsub("%s+$", "")
file:close()
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.body = body
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = "Bearer " .. (os.getenv("KEY") or "sk-atdp-demo-agent")
