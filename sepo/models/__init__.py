"""Language models sepo builds or loads: the tiny local test model (`sepo.models.tiny`,
`init_tiny_model`)."""
