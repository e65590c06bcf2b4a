--[[ gpufrac's job-submit rule for Slurm's job_submit/lua plugin (JobSubmitPlugins=lua; Slurm
reads job_submit.lua next to slurm.conf).

A job asking gpufrac for part of a GPU (--gpu-memory SIZE or --gpu-fraction F, the options of
libgpufrac_spank.so) gets the number of `shard` GRES that part needs on this cluster's GPUs, so
that Slurm's scheduler never places more memory on a GPU than it has. A request no GPU here can
hold is refused at submission with the reason. Jobs without gpufrac's options, and jobs that ask
for whole GPUs (--gres=gpu:N, --gpus...), are left as they are.

On a cluster that shares GPUs through Slurm's `mps` GRES instead, set GPUFRAC_GRES to "mps" and
give each model its MPS count per GPU (100 as Slurm's documentation has it) as `shards`: the rule
then books the request's share of those units, or the user's own --gres=mps:N where that is more
(N is also the share of the GPU's SMs Slurm gives the job, which the user may want larger).

Edit GPUFRAC_GPUS to describe the cluster: one entry per GPU model, with its memory and the
shard count per GPU that gres.conf declares for it (docs/slurm.md). Shards are a count, the same
unit on every node, so give every model the same memory per shard where you can (e.g. 1 GiB: an
80 GB GPU has 80 shards, a 40 GB one 40); where models differ, a job gets the largest count any
model that can hold it needs, which is safe on every model and wastes some on the larger ones.
The SPANK plugin holds each step to the memory its shards stand for: give it the same memory per
shard (memory / shards) in plugstack.conf's shard_memory= on each node. --]]

GPUFRAC_GRES = "shard"

GPUFRAC_GPUS = {
  { name = "A100-40GB", memory = "40G", shards = 8 },
}

local GiB = 1024 * 1024 * 1024
local OPTION_PREFIX = "_SLURM_SPANK_OPTION_gpufrac_"

-- Sizes as gpufrac writes them: binary units, "10G", "10GiB", "1536Mi", "512M", "1.5T".
-- `text` for a log line: anything but printable ASCII (a user's option text may hold newlines
-- or terminal escapes) as "?".
local function printable(text)
  return (string.gsub(text, "[^\32-\126]", "?"))
end

local function parse_size(text)
  if text == nil then return nil end
  local number, unit = string.match(text, "^%s*([%d%.]+)%s*(%a*)%s*$")
  number = tonumber(number)
  if number == nil or number <= 0 then return nil end
  local scale = { [""] = 1, B = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4 }
  unit = string.upper(unit)
  unit = string.gsub(unit, "IB$", "")
  unit = string.gsub(unit, "I$", "")
  if unit ~= "B" then unit = string.gsub(unit, "B$", "") end
  if scale[unit] == nil then return nil end
  return math.floor(number * scale[unit])
end

-- Shares: "0.25" or "25%", strictly between 0 and 1.
local function parse_fraction(text)
  if text == nil then return nil end
  local number, percent = string.match(text, "^%s*([%d%.]+)%s*(%%?)%s*$")
  number = tonumber(number)
  if number == nil then return nil end
  if percent == "%" then number = number / 100 end
  if number <= 0 or number >= 1 then return nil end
  return number
end

local function format_gib(bytes)
  return string.format("%.1f GiB", bytes / GiB)
end

-- gpufrac's options as srun, sbatch and salloc hand them over to slurmctld.
local function gpufrac_options(job_desc)
  local options = {}
  local env = job_desc.spank_job_env
  if env == nil then return options end
  for _, entry in pairs(env) do
    local name, value = string.match(entry, "^" .. OPTION_PREFIX .. "([%w_]+)=(.*)$")
    if name ~= nil then options[name] = value end
  end
  return options
end

-- Whether the job asks for whole GPUs in any of Slurm's ways.
local function asks_whole_gpus(job_desc)
  for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
    local value = job_desc[field]
    if value ~= nil and string.find(value, "gpu", 1, true) ~= nil then return true end
  end
  return false
end

-- The shards the request needs: nil and the reason when no GPU model here can hold it.
function gpufrac_shards_needed(memory_text, fraction_text)
  local memory, fraction
  if memory_text ~= nil and fraction_text ~= nil then
    return nil, "give one of --gpu-memory and --gpu-fraction, not both"
  elseif memory_text ~= nil then
    memory = parse_size(memory_text)
    if memory == nil then return nil, "--gpu-memory " .. memory_text .. " is not a size" end
  elseif fraction_text ~= nil then
    fraction = parse_fraction(fraction_text)
    if fraction == nil then
      return nil, "--gpu-fraction " .. fraction_text .. " is not a share between 0 and 1"
    end
  else
    return nil, "--gpu-compute needs --gpu-memory or --gpu-fraction"
  end
  local needed, largest = nil, 0
  for _, model in ipairs(GPUFRAC_GPUS) do
    local total = parse_size(model.memory)
    if total ~= nil and total > largest then largest = total end
    local count
    if memory ~= nil then
      if total ~= nil and memory <= total then
        count = math.ceil(memory * model.shards / total)
      end
    else
      count = math.ceil(fraction * model.shards - 1e-9)
    end
    if count ~= nil then
      if count < 1 then count = 1 end
      if needed == nil or count > needed then needed = count end
    end
  end
  if needed == nil then
    return nil, "--gpu-memory " .. memory_text .. " is more than any GPU here has (the largest has " ..
      format_gib(largest) .. ")"
  end
  return needed
end

-- tres_per_node with `count` of GPUFRAC_GRES in place of the user's own request of it; for mps,
-- the user's count where it is larger.
local function with_units(tres_per_node, count)
  local kept = {}
  if tres_per_node ~= nil then
    for item in string.gmatch(tres_per_node, "[^,]+") do
      if string.match(item, "^gres[:/]([^:]+)") ~= GPUFRAC_GRES then
        table.insert(kept, item)
      elseif GPUFRAC_GRES == "mps" then
        local asked = tonumber(string.match(item, ":(%d+)$"))
        if asked ~= nil and asked > count then count = asked end
      end
    end
  end
  table.insert(kept, "gres:" .. GPUFRAC_GRES .. ":" .. count)
  return table.concat(kept, ",")
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local options = gpufrac_options(job_desc)
  if next(options) == nil then return slurm.SUCCESS end
  if asks_whole_gpus(job_desc) then return slurm.SUCCESS end
  local count, reason = gpufrac_shards_needed(options["gpu_memory"], options["gpu_fraction"])
  if count == nil then
    reason = printable(reason)
    slurm.log_user("gpufrac: %s", reason)
    slurm.log_info("gpufrac: refused a job of uid %u: %s", submit_uid, reason)
    return slurm.ERROR
  end
  job_desc.tres_per_node = with_units(job_desc.tres_per_node, count)
  return slurm.SUCCESS
end

-- A gpufrac job's shards follow its request: its user may not change them afterwards (with
-- `scontrol update ... TresPerNode=`, while it is pending). Only root may.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 or job_desc.tres_per_node == nil then return slurm.SUCCESS end
  if next(gpufrac_options(job_rec)) == nil then return slurm.SUCCESS end
  local reason = "job " .. tostring(job_rec.job_id) .. "'s shards follow its --gpu-memory or " ..
    "--gpu-fraction; submit it again to change them"
  slurm.log_user("gpufrac: %s", reason)
  slurm.log_info("gpufrac: refused an update by uid %u: %s", modify_uid, reason)
  return slurm.ERROR
end

return slurm.SUCCESS
