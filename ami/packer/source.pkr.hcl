# Packer reaches the build instance over SSH tunnelled through SSM Session Manager: no inbound port, no public IP.
# The machine running packer needs the session-manager-plugin.

source "amazon-ebs" "gpufleet" {
  region          = var.region
  subnet_id       = var.subnet_id
  instance_type   = var.build_instance_type
  ami_name        = "gpufleet-${var.profile}-${local.build_stamp}"
  ami_description = var.profile_description

  source_ami_filter {
    filters = {
      name                = var.source_ami_name
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [var.source_ami_owner]
    most_recent = true
    # EC2 hides deprecated public AMIs from DescribeImages unless asked, and public AMIs are deprecated two years
    # after creation: the last Ubuntu 18.04 images (2023) are found only this way. most_recent still picks the
    # newest match, so bases with current images are unaffected.
    # source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ami-deprecate.html,
    # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EnableImageDeprecation.html;
    # packer-plugin-amazon issue #261, option added by PR #404 (released in v1.2.8; builder/common/ami_filter.go).
    include_deprecated = true
  }

  communicator  = "ssh"
  ssh_username  = var.ssh_username
  ssh_interface = "session_manager"

  # With iam_instance_profile set (gpufleet ami render --instance-profile), the build instance gets that profile and
  # the policy document below is unused; empty, Packer creates a temporary packer-* role and instance profile with
  # it (the caller then needs iam:CreateRole and iam:PassRole).
  # source: packer-plugin-amazon v1.3.3 builder/common/step_iam_instance_profile.go (a non-empty
  # IamInstanceProfile returns before the temporary profile is created) and run_config.go ("If IamInstanceProfile
  # is specified it will be used instead").
  iam_instance_profile = var.instance_profile
  temporary_iam_instance_profile_policy_document {
    Version = "2012-10-17"
    Statement {
      Effect = "Allow"
      # What the SSM agent needs for the tunnel: gpufleet/ami/__init__.py SSM_AGENT_ACTIONS.
      Action = [
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
      ]
      Resource = ["*"]
    }
  }

  # IMDSv2 only, on the build instance and (imds_support) on instances launched from the image.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  imds_support = "v2.0"

  encrypt_boot = true
  kms_key_id   = var.kms_key_id
  launch_block_device_mappings {
    device_name           = var.root_device_name
    volume_size           = var.root_volume_gib
    volume_type           = "gp3"
    iops                  = var.root_volume_iops
    throughput            = var.root_volume_throughput
    encrypted             = true
    delete_on_termination = true
  }

  tags          = merge(local.image_tags, { "gpufleet:source-ami" = "{{ .SourceAMI }}" })
  snapshot_tags = merge(local.image_tags, { "gpufleet:source-ami" = "{{ .SourceAMI }}" })
  run_tags      = local.image_tags
}
