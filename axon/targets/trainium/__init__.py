"""AWS Trainium (trn1, trn2) through NKI: hardware description, instruction specs, emitter, simulator, model."""
