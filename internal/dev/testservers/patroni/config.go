package patroni

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// This file writes a member's patroni.yml: the DCS, the REST API, PostgreSQL's
// settings and the credentials, as a member in a pod would be configured.

// writeConfig writes member m's patroni.yml and creates its directories.
func (c *Cluster) writeConfig(m *member) error {
	if err := c.mkdirOwned(m.dir); err != nil {
		return err
	}
	secs := func(d time.Duration) int { return int(d.Round(time.Second) / time.Second) }
	pg := netip.AddrPortFrom(m.ip, uint16(c.opts.PostgresPort)).String()
	rest := netip.AddrPortFrom(m.ip, uint16(c.opts.RESTPort)).String()
	cfg := fmt.Sprintf(`scope: %[1]s
name: %[2]s
log:
  level: INFO
restapi:
  listen: %[3]s
  connect_address: %[3]s
etcd3:
  hosts: %[4]s
bootstrap:
  dcs:
    ttl: %[5]d
    loop_wait: %[6]d
    retry_timeout: %[7]d
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
  - encoding: UTF8
  - auth-local: trust
postgresql:
  listen: %[8]s
  connect_address: %[8]s
  data_dir: %[9]s/data
  bin_dir: %[10]s
  pgpass: %[9]s/pgpass
  authentication:
    superuser:
      username: %[11]s
      password: %[12]s
    replication:
      username: %[13]s
      password: %[14]s
    rewind:
      username: %[11]s
      password: %[12]s
  parameters:
    unix_socket_directories: %[9]s
    shared_buffers: 16MB
    max_connections: 40
    fsync: "off"
  pg_hba:
  - local all all trust
  - host all all 127.0.0.0/8 md5
  - host replication %[13]s 127.0.0.0/8 md5
`, c.opts.Scope, m.name, rest, netip.AddrPortFrom(c.opts.DCSIP, uint16(c.opts.DCSPort)),
		secs(c.opts.TTL), secs(c.opts.LoopWait), secs(c.opts.RetryTimeout),
		pg, m.dir, postgresBin, Superuser, SuperuserPassword, replicationUser, replicationPass)
	path := filepath.Join(m.dir, "patroni.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}
