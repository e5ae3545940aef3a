"""What Sluice records about calls: the audit writer (and its spool), metrics,
the capacity-error alert and the audit trail's retention.
"""
