"""Can each caller inside a VPC reach every service it calls from every subnet it may run in: the destinations a
caller may declare (destinations), the rules (rules), read from a synthesized cloud assembly (assembly) or from the
described network of an existing VPC (gpufleet.ops.preflight)."""
