# Sourced by the farm-redis entrypoint (after `umask 077`): /tmp/redis.conf holds every role's
# ACL user (users.acl, written by farm.core.roles.redis_image_users), each password's SHA-256 in
# place of its @ROLE_SHA256@. The passwords come by the environment, never redis-server's argv:
# REDIS_PASSWORD (the admin's) and REDIS_PASSWORD_CONTROL, _WORKER and _CLI.
conf=$(cat /usr/local/lib/farm-redis/users.acl)
for role in ADMIN CONTROL WORKER CLI; do
  var=REDIS_PASSWORD_$role
  [ "$role" = ADMIN ] && var=REDIS_PASSWORD
  eval "password=\${$var:-}"
  [ -n "$password" ] || { echo "farm-redis: set $var" >&2; exit 78; }
  sha=$(printf '%s' "$password" | sha256sum | cut -d ' ' -f 1)
  conf=$(printf '%s\n' "$conf" | sed "s/@${role}_SHA256@/$sha/")
done
# The default user's password is no one's: the hash of random bytes, made at each start.
nobodys=$(head -c 32 /dev/urandom | sha256sum | cut -d ' ' -f 1)
conf=$(printf '%s\n' "$conf" | sed "s/@NOBODYS_SHA256@/$nobodys/")
printf '%s\n' "$conf" > /tmp/redis.conf
unset password sha conf nobodys
