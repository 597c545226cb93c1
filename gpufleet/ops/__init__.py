"""boto3 operator logic behind the cluster and image commands (imported by handlers only, never at CLI start)."""
