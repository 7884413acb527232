"""Config groups, their schemas, composition and validation."""
