-- Argo CD health check for trawl.dev/ScrapeJob.
-- Install: resource.customizations.health.trawl.dev_ScrapeJob in argocd-cm (see docs/gitops/README.md).
--
-- Reads the conventions every Trawl status follows: status.observedGeneration against
-- metadata.generation, and metav1-style conditions (Ready, Reconciling, Stalled, plus the job's
-- Complete, Failed and Suspended), with status.phase as a fallback.
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
  if status ~= nil and status.message ~= nil and status.message ~= "" then
    return status.message
  end
  return fallback
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to accept the job"
  return hs
end

local generation = obj.metadata.generation
local observed = status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

if is_true(status, "Failed") or status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = message_of(status, "Failed", "The job failed")
  return hs
end
if is_true(status, "Complete") or status.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = message_of(status, "Complete", "The job completed")
  return hs
end
if is_true(status, "Stalled") then
  hs.status = "Degraded"
  hs.message = message_of(status, "Stalled", "The operator cannot make progress")
  return hs
end
if is_true(status, "Suspended") or status.phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = message_of(status, "Suspended", "The job is suspended")
  return hs
end

hs.status = "Progressing"
hs.message = message_of(status, "Ready", "The job is " .. string.lower(status.phase or "pending"))
return hs
