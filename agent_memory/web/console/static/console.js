// agent-memory console: the pages work without this; it only moves focus to a page's
// status message after a change, so keyboard and screen-reader users hear what happened.
document.addEventListener("DOMContentLoaded", () => {
  const status = document.querySelector(".done[role=status]");
  if (status) {
    status.setAttribute("tabindex", "-1");
    status.focus();
  }
});
