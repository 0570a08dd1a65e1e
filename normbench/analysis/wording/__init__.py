"""What people read: units and numbers (`units`, `present`), a claim in words (`claim_meta`,
`claims_text`: claims.md) and the display names of arms and metrics (`figure_names`)."""
