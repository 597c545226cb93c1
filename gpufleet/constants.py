"""gpufleet's vocabulary: every name that more than one layer spells (configuration values, tag keys, hook and
output names), defined once.

This module imports nothing, not even the standard library, so every layer can import it: the configuration models,
the validators, the stacks, the operator commands and the Lambda assets (stacks/constructs/capacity_fallback/ and
group_capacity/ carry a link to this file in runtime/gpufleet/). The import contracts in pyproject.toml
([tool.importlinter]) keep it a leaf.
"""

# flavour: how an environment runs its nodes. fleet: gpufleet's own node group (a Spot Fleet or an Auto Scaling group,
# fleet.backend) booting a gpufleet image with gpufleet's node scripts; eks: an EKS cluster whose GPU managed node
# groups boot EKS's AL2023 NVIDIA image, jobs running as Kubernetes MPIJobs (docs/design-eks.md, "Design").
FLAVOUR_FLEET = "fleet"
FLAVOUR_EKS = "eks"
FLAVOURS = (FLAVOUR_FLEET, FLAVOUR_EKS)
# eks.kubernetes_version: the versions gpufleet pins a kubectl Lambda layer for. aws-cdk-lib 2.275's
# aws_eks_v2.KubernetesVersion.V1_35 asks for "a KubectlV35Layer from @aws-cdk/lambda-layer-kubectl-v35" (its
# docstring); EKS has offered 1.35 since 2026-01-28, in standard support until 2027-03-27 (endoflife.date/amazon-eks).
EKS_KUBERNETES_VERSIONS = ("1.35",)
# The GPU nodes of an eks environment, labelled as the lab labels them (terraform-aws-eks-blueprints
# patterns/nvidia-gpu-efa/eks.tf) and tainted so that only pods that tolerate the taint land on them: the stack puts
# labels and taint on the GPU node groups, the MPIJobs (gpufleet/k8s/) select and tolerate them.
EKS_GPU_NODE_LABEL = "nvidia.com/gpu.present"
EKS_EFA_NODE_LABEL = "vpc.amazonaws.com/efa.present"
EKS_GPU_NODE_TAINT_KEY = "nvidia.com/gpu"
EKS_GPU_NODE_TAINT_VALUE = "true"
# The AWS account whose ECR registry serves EKS's add-on images in each region EKS runs in, as
# ACCOUNT.dkr.ecr.REGION.DOMAIN (the EFA device plugin's image comes from there: stacks/constructs/eks_add_ons.py).
# source: EKS user guide, "View Amazon container image registries for Amazon EKS add-ons" (add-ons-images):
#   awsdocs/amazon-eks-user-guide latest/ug/workloads/add-ons-images.adoc at 4d52b4d (2024-12-18) for every row but
#   the five below, and the current page (docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html, as the search
#   tool stored it) for ap-east-2, ap-southeast-5, ap-southeast-6 and ap-southeast-7. That page writes ap-east-2's
#   registry as "533267051163.dkr.ecr.ap-east-1.amazonaws.com"; the host is built from the environment's region here,
#   as awslabs/amazon-eks-ami templates/al2/runtime/get-ecr-uri.sh builds it (${acct}.dkr.ecr.${region}).
#   mx-central-1 (730335286997) is in get-ecr-uri.sh and the GuardDuty agent's table, not in the excerpts of the
#   user guide page read here (unconfirmed there). get-ecr-uri.sh agrees with every other row.
# A region that is not here is one gpufleet cannot tell an eks node where to pull from: gpufleet validate refuses it
# (gpufleet/validators/eks.py AddOnRegistryRegionValidator).
EKS_ADD_ON_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-northeast-1": "602401143452",
    "ap-northeast-2": "602401143452",
    "ap-northeast-3": "602401143452",
    "ap-south-1": "602401143452",
    "ap-south-2": "900889452093",
    "ap-southeast-1": "602401143452",
    "ap-southeast-2": "602401143452",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-central-1": "602401143452",
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-1": "602401143452",
    "eu-central-2": "900612956339",
    "eu-north-1": "602401143452",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "eu-west-1": "602401143452",
    "eu-west-2": "602401143452",
    "eu-west-3": "602401143452",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "sa-east-1": "602401143452",
    "us-east-1": "602401143452",
    "us-east-2": "602401143452",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
    "us-west-1": "602401143452",
    "us-west-2": "602401143452",
}

# fleet.backend: what keeps the nodes running, an EC2 Spot Fleet request or an EC2 Auto Scaling group.
BACKEND_SPOT_FLEET = "spot-fleet"
BACKEND_AUTO_SCALING = "auto-scaling"
FLEET_BACKENDS = (BACKEND_SPOT_FLEET, BACKEND_AUTO_SCALING)

# fleet.type, as the Spot Fleet API spells it: maintain replaces interrupted nodes, request is one-shot.
FLEET_TYPE_MAINTAIN = "maintain"
FLEET_TYPE_REQUEST = "request"
FLEET_TYPES = (FLEET_TYPE_MAINTAIN, FLEET_TYPE_REQUEST)

# fleet.allocation_strategy and fleet.on_demand_allocation_strategy, as the Spot Fleet API spells them.
ALLOCATION_STRATEGIES = (
    "priceCapacityOptimized",
    "capacityOptimized",
    "capacityOptimizedPrioritized",
    "diversified",
    "lowestPrice",
)
ON_DEMAND_ALLOCATION_STRATEGIES = ("lowestPrice", "prioritized")
# The same strategies as an Auto Scaling group's InstancesDistribution spells them; Spot Fleet's diversified has no
# counterpart. source: cfn-lint 1.58's bundled AWS::AutoScaling::AutoScalingGroup schema (cfnlint.schema
# PROVIDER_SCHEMA_MANAGER, definitions.InstancesDistribution): SpotAllocationStrategy "capacity-optimized",
# "capacity-optimized-prioritized", "lowest-price", "price-capacity-optimized"; OnDemandAllocationStrategy
# "lowest-price", "prioritized" (tests/gpufleet/validators/test_fleet.py reads the schema).
AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES = {
    "priceCapacityOptimized": "price-capacity-optimized",
    "capacityOptimized": "capacity-optimized",
    "capacityOptimizedPrioritized": "capacity-optimized-prioritized",
    "lowestPrice": "lowest-price",
}
AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES = {"lowestPrice": "lowest-price", "prioritized": "prioritized"}

# fleet.capacity_rebalance.replacement_strategy, as the EC2 API spells it (SpotCapacityRebalance ReplacementStrategy).
REPLACEMENT_LAUNCH = "launch"
REPLACEMENT_LAUNCH_BEFORE_TERMINATE = "launch-before-terminate"
REPLACEMENT_STRATEGIES = (REPLACEMENT_LAUNCH, REPLACEMENT_LAUNCH_BEFORE_TERMINATE)

# fleet.rollout: what a new node image does to a maintain fleet (gpufleet.environment.Fleet.image_rollout).
ROLLOUT_MANUAL = "manual"
ROLLOUT_REPLACE_ALL = "replace-all"
ROLLOUTS = (ROLLOUT_MANUAL, ROLLOUT_REPLACE_ALL)

# capacity.reservation.preference, and how a launch template and an Auto Scaling group spell each (cfn-lint's bundled
# AWS::EC2::LaunchTemplate and AWS::AutoScaling::AutoScalingGroup schemas, CapacityReservationPreference).
RESERVATION_PREFERENCE_ONLY = "only"
RESERVATION_PREFERENCE_FIRST = "first"
RESERVATION_PREFERENCES = (RESERVATION_PREFERENCE_ONLY, RESERVATION_PREFERENCE_FIRST)
LAUNCH_TEMPLATE_RESERVATIONS_ONLY = "capacity-reservations-only"
AUTO_SCALING_RESERVATION_PREFERENCES = {
    RESERVATION_PREFERENCE_ONLY: "capacity-reservations-only",
    RESERVATION_PREFERENCE_FIRST: "capacity-reservations-first",
}
# The launch template market type of a Capacity Block (EC2 user guide, capacity-blocks-launch.html).
CAPACITY_BLOCK_MARKET_TYPE = "capacity-block"
# DescribeInstanceTypes' SupportedUsageClasses value of a type that Capacity Blocks sell (gpufleet/instance_types.yaml).
CAPACITY_BLOCK_USAGE_CLASS = "capacity-block"

# The node launch template's instance metadata options and root volume (stacks/constructs/node_launch_template.py).
# `gpufleet preflight` gives the same values to IAM's policy simulator as the condition keys of the nodes' launch
# (gpufleet.ops.preflight.deploy_request_context).
NODE_METADATA_HTTP_ENDPOINT = "enabled"
NODE_METADATA_HTTP_TOKENS = "required"  # IMDSv2 only
NODE_METADATA_HOP_LIMIT = 2  # containers (nvidia-docker) reach IMDSv2 through one extra network hop
# The EKS GPU nodes' hop limit (stacks/constructs/eks_node_launch_template.py): 1, so that a pod outside the host's
# network namespace gets no answer from IMDS and so not the node role's credentials; pods that need AWS get a role of
# their own through EKS Pod Identity (EKS user guide, al2023: "the default hop count for managed node groups is set to
# 1. This means that containers won't have access to the node's credentials using IMDS"; docs/design-eks.md, "What
# pods reach"). Host-network pods (aws-node, kube-proxy, the Pod Identity agent, the EFA plugin) still reach IMDS.
EKS_NODE_METADATA_HOP_LIMIT = 1
NODE_ROOT_VOLUME_TYPE = "gp3"
NODE_ROOT_VOLUME_ENCRYPTED = True

# node.mig_purpose: work that stays inside one MIG instance. NVIDIA MIG user guide, "Deployment Considerations"
# (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/deployment-considerations.html): "NCCL is currently not
# supported with MIG"; "P2P between MIG instances on different GPUs, or between MIG instances to non-MIG mode GPU
# devices are not supported".
MIG_PURPOSES = ("single-node-inference", "independent-jobs")

# storage.lustre: an FSx for Lustre file system in the environment's own stack (stacks/storage_stack.py).
# Deployment types as the FSx API spells them (botocore's fsx model, LustreDeploymentType; the CloudFormation user
# guide, AWS::FSx::FileSystem LustreConfiguration, "Allowed values: PERSISTENT_1 | PERSISTENT_2 | SCRATCH_1 |
# SCRATCH_2"). SCRATCH_1 is left out: it takes no data repository association ("supported on all FSx for Lustre 2.12
# and 2.15 file systems, excluding scratch_1 deployment type", botocore's fsx model, CreateDataRepositoryAssociation).
LUSTRE_SCRATCH_2 = "SCRATCH_2"
LUSTRE_PERSISTENT_1 = "PERSISTENT_1"
LUSTRE_PERSISTENT_2 = "PERSISTENT_2"
LUSTRE_DEPLOYMENT_TYPES = (LUSTRE_PERSISTENT_2, LUSTRE_PERSISTENT_1, LUSTRE_SCRATCH_2)
# storage.lustre.compression: DataCompressionType "NONE | LZ4" (botocore's fsx model, DataCompressionType).
LUSTRE_COMPRESSIONS = ("LZ4", "NONE")
# storage.data_repository.import_events / export_events: the events of a data repository association's
# AutoImportPolicy and AutoExportPolicy (botocore's fsx model, EventType: NEW, CHANGED, DELETED).
DATA_REPOSITORY_EVENTS = ("NEW", "CHANGED", "DELETED")
# storage.on_destroy: what deleting the storage stack does to the file system.
STORAGE_RETAIN = "retain"
STORAGE_DELETE = "delete"
STORAGE_ON_DESTROY = (STORAGE_RETAIN, STORAGE_DELETE)
# The node tag that carries the shared file system's Lustre mount source (DNS_NAME@tcp:/MOUNT_NAME): the launch
# template sets it from the storage stack's values at deploy time (the user data is compressed at synthesis and can
# hold no deploy-time value), and scripts/node/shared-storage.sh reads it from the instance metadata.
SHARED_STORAGE_TAG_KEY = "gpufleet:lustre-mount"

# Tag on every resource and node of an environment; operator tools and IAM conditions select by it.
ENVIRONMENT_TAG_KEY = "gpufleet:environment"
# The tag a node sets on its own instance at every boot, once its setup and health check are done
# (scripts/node/node-ready.sh): READINESS_READY, READINESS_BOOTING (alone or with the step under way), or "not ready: "
# and the reason. `gpufleet hosts` lists only ready nodes; the node role may set this key and no other
# (stacks/constructs/node_readiness.py).
READINESS_TAG_KEY = "gpufleet:readiness"
READINESS_READY = "ready"
READINESS_BOOTING = "booting"
# What a booting node says as each setup step starts (scripts/node/run-setup.sh): this, then "K/N NAME".
READINESS_BOOTING_STEP = "booting: step "
# Tags on every image and snapshot the AMI pipeline builds: images are found by the profile tag; the source-ami tag
# marks an image Packer has finished (ami/packer/locals.pkr.hcl and source.pkr.hcl set both).
PROFILE_TAG_KEY = "gpufleet:profile"
SOURCE_AMI_TAG_KEY = "gpufleet:source-ami"

# The termination lifecycle hook of an Auto Scaling group (fleet.backend auto-scaling), which the node watcher
# completes (stacks/constructs/gpu_auto_scaling_group.py, scripts/node/spot-watcher.sh).
TERMINATION_HOOK_NAME = "gpufleet-checkpoint"
# How long a node the group terminates waits in Terminating:Wait for the checkpoint hook, at most, before the
# termination goes on. The API allows 30 to 7200 seconds (PutLifecycleHook HeartbeatTimeout: "The range is from 30 to
# 7200 seconds. The default value is 3600"; the same range in the LifecycleHookSpecification of the group's schema).
# A spot interruption gives two minutes whatever the hook says; a termination the group decides (scale-in,
# rebalancing, replacement, deletion, a Capacity Block's scheduled scale-in) gets this.
TERMINATION_HOOK_TIMEOUT_SECONDS = 600

# The custom resource that sets an Auto Scaling group's desired capacity to its target when a deploy creates the group
# or changes the target (stacks/constructs/group_capacity/); `gpufleet plan` reads its Target as it reads a desired
# capacity.
GROUP_CAPACITY_RESOURCE_TYPE = "Custom::GpufleetGroupCapacity"
# The custom resource that gives a Capacity Block group its scheduled actions and desired capacity at deploy time, from
# the block's Start and End (stacks/constructs/block_capacity/); `gpufleet plan` says what a change of them does.
BLOCK_CAPACITY_RESOURCE_TYPE = "Custom::GpufleetBlockCapacity"

# The cluster user (scripts/node/cluster-user.sh makes it on every node; the environment's Session Manager document
# opens a shell as it): one name and one uid and gid on every node, so that files on shared storage keep their owner.
# 2000 stays clear of the images' default users (ubuntu and ec2-user are 1000; useradd numbers later ones, ssm-user
# among them, upwards from there) and of system accounts (below 1000); a node whose image already uses it refuses to
# set up (cluster-user.sh names the account).
CLUSTER_USER_NAME = "gpufleet"
CLUSTER_USER_ID = 2000
# The custom resource that makes the cluster user's SSH key at deploy time and stores it in the environment's secret
# (stacks/constructs/cluster_user/).
CLUSTER_USER_KEY_RESOURCE_TYPE = "Custom::GpufleetClusterUserKey"

# EC2 begins terminating the instances still running in a Capacity Block this long before the block's end (EC2 user
# guide, capacity-blocks-using.html: "Thirty minutes before the reservation expires, we begin to terminate any
# instances that are still running in the Capacity Block").
CAPACITY_BLOCK_TERMINATION_LEAD_MINUTES = 30

# The cluster stack's outputs, which the operator commands and `gpufleet summary` read.
FLEET_OUTPUT_KEY = "FleetRequestId"
AUTO_SCALING_GROUP_OUTPUT_KEY = "AutoScalingGroupName"
# The output that names the node group, by fleet.backend.
NODE_GROUP_OUTPUTS = {BACKEND_SPOT_FLEET: FLEET_OUTPUT_KEY, BACKEND_AUTO_SCALING: AUTO_SCALING_GROUP_OUTPUT_KEY}
PLACEMENT_GROUP_OUTPUT_KEY = "PlacementGroupName"
SECURITY_GROUP_OUTPUT_KEY = "SecurityGroupId"
LAUNCH_TEMPLATE_OUTPUT_KEY = "LaunchTemplateId"
SUBNET_OUTPUT_KEY = "SubnetId"
# The storage stack's outputs (stacks/storage_stack.py).
FILE_SYSTEM_OUTPUT_KEY = "FileSystemId"
MOUNT_SOURCE_OUTPUT_KEY = "LustreMountSource"
STORAGE_BUCKET_OUTPUT_KEY = "DataRepositoryBucket"
# The description of the file system's security group (stacks/storage_stack.py), NAME the environment's: how `gpufleet
# down` finds a group the stack's Retain policy left once the stack is gone (with the ENVIRONMENT_TAG_KEY tag).
STORAGE_SECURITY_GROUP_DESCRIPTION = "gpufleet {name} shared file system: Lustre from its file servers and the nodes"
AVAILABILITY_ZONE_OUTPUT_KEY = "AvailabilityZone"
# The Session Manager document that opens a shell as the cluster user (`aws ssm start-session --document-name`).
CLUSTER_SHELL_DOCUMENT_OUTPUT_KEY = "ClusterShellDocument"
# The id of the spot interruption rehearsal's FIS experiment template
# (stacks/constructs/spot_interruption_rehearsal.py), an output of clusters with spot nodes only: `gpufleet rehearse`
# starts an experiment from it.
SPOT_INTERRUPTION_TEMPLATE_OUTPUT_KEY = "SpotInterruptionExperimentTemplateId"

# How often the capacity fallback looks at the fleet (its EventBridge schedule, rate(5 minutes)): EventBridge rate
# expressions count in whole minutes at the finest ("Valid values: minute | minutes | hour | hours | day | days",
# EventBridge user guide, Rate expressions reference,
# https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html). A time bound shorter than this
# cannot be honoured: the environment's parsing refuses one.
FALLBACK_CHECK_INTERVAL_MINUTES = 5

# The interface VPC endpoints of a new VPC, so that nodes without a NAT gateway reach the AWS APIs they call, by the
# construct id the network stack gives each (its logical ids) and the service name AWS gives it
# (com.amazonaws.REGION.NAME; aws-cdk-lib's InterfaceVpcEndpointAwsService constants name the same services). Each
# takes an address in the node subnet (gpufleet.validators.network counts them).
INTERFACE_ENDPOINT_SERVICES = {
    "Ssm": "ssm",
    "SsmMessages": "ssmmessages",
    "Ec2Messages": "ec2messages",
    "Ec2": "ec2",
    "EcrApi": "ecr.api",
    "EcrDocker": "ecr.dkr",
    "CloudWatchLogs": "logs",
    "CloudWatchMetrics": "monitoring",
    "Sts": "sts",
    # scripts/node/cluster-user.sh reads the cluster user's key from Secrets Manager at boot.
    "SecretsManager": "secretsmanager",
}

# Where `cdk deploy` publishes file assets: the bootstrap stack's bucket, cdk-QUALIFIER-assets-ACCOUNT-REGION, with
# the default qualifier hnb659fds (aws-cdk's lib/api/bootstrap/bootstrap-template.yaml, Parameters.Qualifier and
# StagingBucket; aws-cdk-lib's DefaultStackSynthesizer.DEFAULT_FILE_ASSETS_BUCKET_NAME). The nodes fetch the operator
# scripts from it; stacks/constructs/operator_scripts.py fails synthesis if the app's synthesizer names another.
CDK_ASSETS_BUCKET = "cdk-hnb659fds-assets-{account}-{region}"

# The AMI pipeline's acceptance gate names every environment it deploys accept-<the first 8 hex digits of its CodeBuild
# build's id> (scripts/lib/pipeline.sh acceptance_environment_name), and its grants reach every stack named
# gpufleet-accept-* and every node tagged gpufleet:environment accept-* (stacks/constructs/ami_acceptance_gate.py
# ACCEPTANCE_ENVIRONMENTS, ACCEPTANCE_STACKS). So the name accept and every name starting accept- are the gate's:
# gpufleet.validators.naming refuses them for any other environment (docs/guides/environments.md, "Reserved names").
ACCEPTANCE_NAME_PREFIX = "accept-"

# What `gpufleet acceptance` (gpufleet.ops.acceptance) has each node print before and after each check's output, read
# back by gpufleet.reports.acceptance: "gpufleet-acceptance: CHECK begin", then "gpufleet-acceptance: CHECK exit N".
ACCEPTANCE_MARKER = "gpufleet-acceptance:"

# The eks flavour's PersistentVolumeClaim (namespace default) of the environment's shared file system, which a pod
# mounts to see the storage (stacks/constructs/eks_add_ons.py makes it where the environment has storage).
EKS_SHARED_STORAGE_CLAIM = "gpufleet-shared"
# 2 MiB huge pages every EFA GPU node of the eks flavour sets aside at boot, so that kubelet advertises them as
# hugepages-2Mi: a pod may request them only if the node pre-allocated them (kubernetes.io, "Manage HugePages"), and
# EKS's AL2023 NVIDIA image allocates none (amazon-eks-ami at 81fec2e: no nr_hugepages in templates/al2023; its EFA
# installer runs --minimal). 5120 MiB is what the lab's MPIJob workers request (terraform-aws-eks-blueprints
# patterns/nvidia-gpu-efa generate-efa-nccl-test.sh: hugepages-2Mi 5120Mi) for libfabric's EFA provider.
EKS_GPU_NODE_HUGEPAGES_MIB = 5120
