-- Argo CD health check for trawl.dev/CronScrapeJob.
-- Install: resource.customizations.health.trawl.dev_CronScrapeJob in argocd-cm (see docs/gitops/README.md).
--
-- A schedule is Healthy once the operator accepted it (Ready=True), Suspended while
-- spec.suspend is true, Degraded when Stalled (an invalid schedule or time zone). The jobs it
-- creates carry their own health.
local hs = {}

local function condition(status, type)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function is_true(status, type)
  local c = condition(status, type)
  return c ~= nil and c.status == "True"
end

local function message_of(status, type, fallback)
  local c = condition(status, type)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
local generation = obj.metadata.generation
if status == nil or (generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation)) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation or 1)
  return hs
end

if is_true(status, "Stalled") then
  hs.status = "Degraded"
  hs.message = message_of(status, "Stalled", "The operator cannot make progress")
  return hs
end
if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "The schedule is suspended"
  return hs
end
if is_true(status, "Ready") then
  hs.status = "Healthy"
  hs.message = message_of(status, "Ready", "Scheduled")
  return hs
end

hs.status = "Progressing"
hs.message = message_of(status, "Ready", "Waiting for the operator")
return hs
