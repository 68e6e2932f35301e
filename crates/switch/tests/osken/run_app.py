"""Runs an os-ken application with os-ken's app manager (what `osken-manager APP
--ofp-tcp-listen-port P --ofp-listen-host H` did; os-ken's PyPI package no longer
installs that command): run_app.py APP.py [--ofp-tcp-listen-port P] [--ofp-listen-host H]
"""

import sys

from os_ken.lib import hub

hub.patch(thread=False)

from os_ken import cfg  # noqa: E402
from os_ken import log  # noqa: E402
from os_ken.base.app_manager import AppManager  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: run_app.py APP.py [os-ken options]")
    cfg.CONF(args=sys.argv[2:], project="os_ken")
    log.init_log()
    AppManager.run_apps([sys.argv[1]])


if __name__ == "__main__":
    main()
