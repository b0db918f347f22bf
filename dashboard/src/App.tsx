import { useEffect } from 'react';
import { Layout } from './components/Layout';
import { ResourcesPage } from './pages/ResourcesPage';
import { RolloutsPage } from './pages/RolloutsPage';
import { RunnersPage } from './pages/RunnersPage';
import { SettingsPage } from './pages/SettingsPage';
import { TracesPage } from './pages/TracesPage';
import { navigate, useLocation } from './router';
import { ConfigProvider } from './state/config';
import { UiProvider } from './state/ui';

function Routes() {
  const { pathname } = useLocation();
  const path = pathname.replace(/\/+$/, '') || '/';
  useEffect(() => {
    if (path === '/') navigate('/rollouts', { replace: true });
  }, [path]);
  switch (path) {
    case '/rollouts':
      return <RolloutsPage />;
    case '/resources':
      return <ResourcesPage />;
    case '/traces':
      return <TracesPage />;
    case '/runners':
      return <RunnersPage />;
    case '/settings':
      return <SettingsPage />;
    case '/':
      return null;
    default:
      return (
        <div className="page" data-testid="not-found">
          <h1>Page not found</h1>
          <p className="dim">No page at {pathname}.</p>
        </div>
      );
  }
}

export function App() {
  return (
    <ConfigProvider>
      <UiProvider>
        <Layout>
          <Routes />
        </Layout>
      </UiProvider>
    </ConfigProvider>
  );
}
