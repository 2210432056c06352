"""What one call carries, records and changes: the Call, the Recorder, interventions, the Trace."""
