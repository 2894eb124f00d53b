"""Write docs/gitops/argocd-cm.yaml from docs/gitops/trawl.dev/<Kind>/health.lua.

    .venv/bin/python hack/gen_argocd_cm.py

tests/unit/test_gitops_health.py fails when the ConfigMap and the scripts differ.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GITOPS = ROOT / "docs" / "gitops"
KINDS = ("ScrapeJob", "ScrapePool", "CronScrapeJob")
HEADER = """\
# Argo CD health checks for Trawl's resources: merge `data` into the argocd-cm ConfigMap of your
# Argo CD installation (or the equivalent `resource.customizations` of the Argo CD operator /
# Helm chart). The scripts are docs/gitops/trawl.dev/<Kind>/health.lua verbatim (a test checks);
# regenerate with hack/gen_argocd_cm.py.
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: argocd
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
data:
"""


def render() -> str:
    lines = [HEADER.rstrip("\n")]
    for kind in KINDS:
        lines.append(f"  resource.customizations.health.trawl.dev_{kind}: |")
        for line in (GITOPS / "trawl.dev" / kind / "health.lua").read_text().splitlines():
            lines.append(f"    {line}" if line else "")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (GITOPS / "argocd-cm.yaml").write_text(render())
    print(f"wrote {(GITOPS / 'argocd-cm.yaml').relative_to(ROOT)}")
