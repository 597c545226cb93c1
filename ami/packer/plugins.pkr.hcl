# Packer >= 1.7 only: `packer init DIR` installs the pinned amazon plugin. Packer 1.6.6 (amazon builder built in)
# does not know this block; `gpufleet ami validate` says what it leaves out there (gpufleet/ami/packer.py).

packer {
  required_plugins {
    amazon = {
      version = "= 1.3.3"
      source  = "github.com/hashicorp/amazon"
    }
  }
}
