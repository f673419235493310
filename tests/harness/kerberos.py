"""A project-local MIT Kerberos KDC on a free loopback port, for the GSSAPI tests
(docs/security.md; /work/shared/SETUP.md, "Secured Kafka and Kerberos here").

Debian's MIT Kerberos 5 (``krb5-kdc``, ``krb5-admin-server``, ``krb5-user``; ``bash
scripts/bootstrap.sh kerberos`` installs them) runs unprivileged: its database, stash, ACL,
``kdc.conf``, ``krb5.conf``, log and keytabs all live under ``<workdir>/kdc``; nothing reads or
writes ``/etc/krb5.conf`` or ``/etc/krb5kdc`` (every tool gets ``KRB5_CONFIG`` and
``KRB5_KDC_PROFILE``). :class:`MitKdc` creates the realm (``kdb5_util create -s``), a random-key
principal and a keytab for each of :data:`PRINCIPALS` (``kadmin.local addprinc -randkey`` /
``ktadd``), then runs ``krb5kdc -n`` (foreground) in its own process group, stopped or killed
by the id of the process it started (and killed at the interpreter's exit, as the other private
servers of :mod:`tests.harness.servers`).

Pitfalls met on the way (the reason for each line of the configuration files):

* the realm's ``kdc = 127.0.0.1:<port>`` must be in the multi-line form (``REALM = {``,
  newline, ``kdc = ...``, newline, ``}``); MIT's parser does not read the one-line form and
  ``kinit`` says "Cannot find KDC for realm";
* ``udp_preference_limit = 1``: clients (MIT's and Java's) talk TCP, so only the TCP port has to
  be free (the KDC listens on UDP on the same number, which :func:`free_port` does not check);
* ``dns_lookup_kdc``/``dns_lookup_realm = false``, ``rdns = false`` and
  ``dns_canonicalize_hostname = false``: nothing asks a DNS server; the service principal of a
  broker reached as ``localhost`` is ``kafka/localhost``.

:func:`missing` says which tools are absent (tests skip naming them).

Example (~1-2 s)::

    with MitKdc(tmp_path) as kdc:
        kdc.kinit(CLIENT)          # a ticket in a credentials cache of the work dir
        kdc.keytab(BROKER), kdc.krb5_conf
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.harness.servers import _PrivateServer

__all__ = ["BROKER", "CLIENT", "PRINCIPALS", "REALM", "TOOLS", "MitKdc", "missing"]

REALM = "TRIDENT.TEST"
BROKER = f"kafka/localhost@{REALM}"
"""The broker's service principal: the client builds it from the service name (``kafka``)
and the host it connects to (the broker advertises ``localhost``)."""
CLIENT = f"etl@{REALM}"
"""The spout's user."""
PRINCIPALS = (BROKER, CLIENT)
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local")
"""The KDC, its database tool and the local admin tool (Debian: ``krb5-kdc``,
``krb5-admin-server``); ``kinit``/``klist`` (``krb5-user``) only for :meth:`MitKdc.kinit`."""
_SBIN = ("/usr/sbin", "/sbin")
_MASTER_PASSWORD = "trident-kdc-master-1"  # a throw-away database's master key


def _which(tool: str) -> str | None:
    """``tool`` on ``PATH`` or in ``/usr/sbin`` (not on a non-root user's ``PATH``)."""
    found = shutil.which(tool)
    if found is None:
        found = shutil.which(tool, path=os.pathsep.join(_SBIN))
    return found


def missing() -> list[str]:
    """The tools of :data:`TOOLS` not installed here (empty: a KDC can run).

    >>> isinstance(missing(), list)
    True
    """
    return [tool for tool in TOOLS if _which(tool) is None]


def _keytab_name(principal: str) -> str:
    return principal.split("@", 1)[0].replace("/", "_") + ".keytab"


class MitKdc(_PrivateServer):
    """An MIT KDC for ``realm`` on a free loopback port (TCP; UDP on the same number), its
    files under ``<workdir>/kdc``, with ``principals`` and a keytab for each.

    Attributes
    ----------
    krb5_conf:
        The clients' configuration (``KRB5_CONFIG``; the JVM's ``java.security.krb5.conf``).
    kdc_conf:
        The KDC's profile (``KRB5_KDC_PROFILE``).
    """

    kind = "MIT KDC"

    def __init__(
        self, workdir: str | Path, realm: str = REALM, principals: Sequence[str] = PRINCIPALS
    ) -> None:
        super().__init__(workdir, None, "kdc")
        self.realm = realm
        self.principals = tuple(principals)
        self.krb5_conf = self.workdir / "krb5.conf"
        self.kdc_conf = self.workdir / "kdc.conf"
        self.database = self.workdir / "principal"

    def keytab(self, principal: str) -> Path:
        """The keytab file of ``principal`` (one of :attr:`principals`)."""
        if principal not in self.principals:
            msg = f"{principal} is not a principal of this KDC ({', '.join(self.principals)})"
            raise KeyError(msg)
        return self.workdir / _keytab_name(principal)

    def env(self) -> dict[str, str]:
        """This process's environment with the KDC's ``KRB5_CONFIG`` and ``KRB5_KDC_PROFILE``
        (and a credentials cache of the work dir)."""
        return {
            **os.environ,
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_KDC_PROFILE": str(self.kdc_conf),
            "KRB5CCNAME": f"FILE:{self.workdir / 'ccache'}",
        }

    # -- the private server's hooks
    def _prepare(self) -> None:
        absent = missing()
        if absent:
            msg = (f"an MIT KDC needs {', '.join(absent)}: run `bash scripts/bootstrap.sh "
                   "kerberos` (Debian's krb5-kdc, krb5-admin-server, krb5-user)")  # fmt: skip
            raise RuntimeError(msg)
        w, port, realm = self.workdir, self.port, self.realm
        (w / "kadm5.acl").write_text(f"*/admin@{realm} *\n")
        self.kdc_conf.write_text(
            "[kdcdefaults]\n"
            f" kdc_listen = 127.0.0.1:{port}\n"
            f" kdc_tcp_listen = 127.0.0.1:{port}\n"
            "[realms]\n"
            f" {realm} = {{\n"
            f"  database_name = {self.database}\n"
            f"  key_stash_file = {w / 'stash'}\n"
            f"  acl_file = {w / 'kadm5.acl'}\n"
            f"  kdc_listen = 127.0.0.1:{port}\n"
            f"  kdc_tcp_listen = 127.0.0.1:{port}\n"
            "  max_life = 10h\n"
            "  max_renewable_life = 1d\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal "
            "aes128-cts-hmac-sha1-96:normal\n"
            " }\n"
            "[logging]\n"
            f" kdc = FILE:{w / 'kdc.log'}\n"
        )
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {realm}\n"
            " dns_lookup_kdc = false\n"
            " dns_lookup_realm = false\n"
            " rdns = false\n"
            " dns_canonicalize_hostname = false\n"
            " udp_preference_limit = 1\n"
            " ticket_lifetime = 10h\n"
            " forwardable = true\n"
            "[realms]\n"
            f" {realm} = {{\n"  # the multi-line form: the one-line form is not read
            f"  kdc = 127.0.0.1:{port}\n"
            " }\n"
            "[domain_realm]\n"
            f" localhost = {realm}\n"
            f" .localhost = {realm}\n"
        )
        if not self.database.exists():
            self._tool("kdb5_util", "create", "-s", "-r", realm, "-P", _MASTER_PASSWORD)
            for principal in self.principals:
                self._tool("kadmin.local", "-r", realm, "-q", f"addprinc -randkey {principal}")
                keytab = self.keytab(principal)
                keytab.unlink(missing_ok=True)
                self._tool("kadmin.local", "-r", realm, "-q",
                           f"ktadd -k {keytab} {principal}")  # fmt: skip
                if not keytab.exists():
                    msg = f"kadmin.local ktadd wrote no keytab for {principal} ({keytab})"
                    raise RuntimeError(msg)

    def _tool(self, tool: str, *args: str) -> str:
        path = _which(tool) or tool
        done = subprocess.run([path, *args], env=self.env(), capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        if done.returncode != 0:
            shown = [a if a != _MASTER_PASSWORD else "***" for a in args]
            msg = (f"{tool} {' '.join(shown)} exited {done.returncode}: "
                   f"{(done.stderr or done.stdout)[-1500:]}")  # fmt: skip
            raise RuntimeError(msg)
        return done.stdout

    def _command(self) -> tuple[list[str], dict[str, Any]]:
        # -n: the foreground (no fork), so the process we started is the KDC; -r: the realm
        args = [_which("krb5kdc") or "krb5kdc", "-n", "-r", self.realm]
        return args, {"env": self.env(), "cwd": str(self.workdir)}

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def kinit(self, principal: str) -> str:
        """Get a ticket for ``principal`` with its keytab (MIT's ``kinit -kt``) into the work
        dir's credentials cache; returns ``klist``'s output (raises if either fails)."""
        self._tool("kinit", "-kt", str(self.keytab(principal)), principal)
        return self._tool("klist")
